"""Asynchronous full-graph training with one-epoch-stale boundaries, PipeGCN-style (book 6.3).

Book: 6.3 asynchronous training.

Used in: chapters/06c_sync_and_async_protocols.ipynb.

PipeGCN (Wan et al., ICLR 2022) hides the halo exchange of subgraph-parallel
training (:mod:`gnnbook.ch6_fullgraph.subgraph`) behind computation: in epoch
``t`` every layer aggregates the halo rows its peers computed in epoch
``t - 1``, and every process adds to its own rows the halo gradients its peers
computed in epoch ``t - 1``.  So the exchange that epoch ``t`` starts (its own
rows forward, its halo gradients back) is only needed in epoch ``t + 1`` and
travels while epoch ``t`` goes on computing: here with non-blocking
``isend`` / ``irecv`` (gloo runs them on its own threads), each group waited
for only where the next epoch uses it (a layer's rows when that layer
aggregates, its gradients when backward reaches it).  Epoch 0 exchanges its
rows before using them (there is nothing older) and has no remote gradient yet.

:func:`train` runs either protocol in the same loop: ``"sync"`` (blocking
exchange, :class:`~gnnbook.ch6_fullgraph.subgraph.HaloExchange`) or ``"pipe"``.
Both send the same rows, so the payload per epoch is the synchronous one,
``2 x layers x halo rows x H x 4``; it is measured over the whole run (messages
are in flight across epoch boundaries, so there is no quiet point inside it).
With ``record_epochs`` the processes return the layer-1 halo rows they used
and the rows they sent; :func:`staleness` finds, for every epoch, which epoch's
rows were used: the staleness **measured**, not assumed.  :func:`time_modes` times
both modes in the same processes, alternating short runs, so that they see the same
machine; with a ``link`` it repeats them with every boundary exchange of both modes taking at
least that link's wire time (:mod:`gnnbook.comm.emulated_link`, a model of a link).  Accuracy: weights are kept every
``eval_every`` epochs and evaluated after training with a synchronous forward; the test accuracy at the best validation
accuracy is reported.

Example:
    >>> out = run_stale("cora", "pipe", epochs=20, record_epochs=5)      # doctest: +SKIP
    >>> staleness(out)["embeddings"]                                      # doctest: +SKIP
    [0, 1, 1, 1, 1]
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ..base.records import record
from ..comm.emulated_link import EmulatedLink, LinkedComm, wire_bytes
from ..training.train import AccuracyCurve, adam_settings
from .protocols import Exchange, gcn_forward
from .subgraph import HaloExchange, LocalGraph, global_correct, load_problem, shared_assignment, sum_gradients_and_loss

MODES = ("sync", "pipe")


@record
@dataclass
class StaleRank:
    """What one of :func:`train`'s processes measured (:func:`run_stale` lists them in rank order)."""

    rank: int
    mode: str  # "sync" or "pipe"
    losses: list[float]  # the global training loss, per epoch
    epoch_s: list[float]
    wait_s: float  # waiting for the boundary exchange, over the run
    allreduce_s: float  # in the gradient all-reduce, over the run
    curve: AccuracyCurve  # validation and test accuracy every eval_every epochs, and the best of them
    training_wire_sent: int  # bytes on this process's sockets while it trained
    all_reduce_expected: int  # gloo's model of the gradient all-reduces
    halo_expected_sent: int  # gloo's model of the boundary exchange (payload + headers) ...
    halo_payload_sent: int  # ... and its payload alone
    halo_rows_sent: int
    halo_rows_received: int
    send_counts: list[int]  # boundary rows to each peer
    recv_counts: list[int]  # from each peer
    used: list[torch.Tensor]  # record_epochs: the layer-1 halo rows used, per epoch
    sent: list[torch.Tensor]  # ... and the rows sent
    grads_used: list  # pipe: the halo gradients added, per epoch (None where none were)
    grads_sent: list[torch.Tensor]
    link_modeled_s: float = 0.0  # with an emulated link: its modelled wire time over the run,
    link_slept_s: float = 0.0  # the part of it this process waited for,
    link_bytes: int = 0  # the bytes modelled,
    link_exchanges: int = 0  # and the exchanges that crossed it


@record
@dataclass
class ModeTimings:
    """:func:`time_modes` in one process: per timing run (in ``modes`` order), its epochs' seconds, waits and losses."""

    rank: int
    modes: list[str]
    linked: list[bool]  # which runs had the emulated link
    link: dict[str, float] | None
    epoch_s: list[list[float]]
    wait_s: list[float]
    allreduce_s: list[float]
    losses: list[list[float]]
    test_acc: list[float]
    link_modeled_s: list[float]
    link_slept_s: list[float]
    link_bytes: list[int]


def _segments(counts: list[int]) -> list[tuple[int, int, int]]:
    out, start = [], 0
    for peer, c in enumerate(counts):
        if c:
            out.append((peer, start, start + c))
        start += c
    return out


class PipeExchange:
    """Stale halo rows and gradients for one process, layer by layer.  Each group of messages
    (``("rows", layer)``, ``("grads", layer)``) is waited for only where the next epoch uses it:
    a layer's rows when that layer aggregates, its gradients when backward reaches it.  With a
    ``link`` (:class:`gnnbook.comm.emulated_link.EmulatedLink`) a group is not ready before its
    modelled arrival."""

    def __init__(self, part: LocalGraph, comm, link: EmulatedLink | None = None):
        self.part, self.comm, self.link = part, comm, link
        self.rows: dict[int, torch.Tensor] = {}          # halo rows to use this epoch, per layer
        self.pending: dict[tuple[str, int], tuple[list[Any], torch.Tensor, float]] = {}  # handles, send buffer, arrival
        self.halo_leaf: dict[int, torch.Tensor] = {}
        self.grad_in: dict[int, torch.Tensor] = {}        # gradients of my sent rows, from peers, last epoch
        self.waits_s = 0.0

    def _start(self, key: tuple[str, int], send: torch.Tensor, send_counts: list[int], recv: torch.Tensor,
               recv_counts: list[int]) -> None:
        self.wait(key)                                     # never two groups of one kind in flight
        posted = time.perf_counter()
        handles = [self.comm.irecv(recv[a:b], peer) for peer, a, b in _segments(recv_counts)]
        handles += [self.comm.isend(send[a:b], peer) for peer, a, b in _segments(send_counts)]
        arrival = 0.0
        if self.link is not None:
            arrival = self.link.post(wire_bytes(recv, recv_counts), posted)
        self.pending[key] = (handles, send, arrival)       # the send buffer stays alive until waited for

    def wait(self, key: tuple[str, int] | None = None) -> None:
        """Wait for one group of messages (``key``) or, without one, for all."""
        start = time.perf_counter()
        for k in ([key] if key is not None else list(self.pending)):
            if k in self.pending:
                handles, _, arrival = self.pending.pop(k)
                for handle in handles:
                    handle.wait()
                if self.link is not None:
                    self.link.wait_until(arrival)
        self.waits_s += time.perf_counter() - start

    def __call__(self, h: torch.Tensor, epoch: int, layer: int) -> torch.Tensor:
        part = self.part
        self.wait(("rows", layer))          # last epoch's rows of this layer: needed now, not before
        sent = h.detach()[part.send_index].contiguous()
        fresh = h.new_empty(sum(part.recv_counts), h.shape[1])
        self._start(("rows", layer), sent, part.send_counts, fresh, part.recv_counts)
        if epoch == 0:                      # nothing older: wait for this epoch's rows
            self.wait(("rows", layer))
            self.rows[layer] = fresh.clone()
        halo = self.rows[layer].clone().requires_grad_(True)
        self.halo_leaf[layer] = halo
        self.rows[layer] = fresh            # filled in by the time next epoch's layer needs it
        if layer in self.grad_in:           # last epoch's gradients of the rows I sent, waited for in backward
            h = _InjectGrad.apply(h, part.send_index, functools.partial(self._gradients, layer))
        return torch.sparse.mm(part.adjacency, torch.cat([h, halo]))

    def _gradients(self, layer: int) -> torch.Tensor:
        self.wait(("grads", layer))
        return self.grad_in[layer]

    def send_gradients(self) -> None:
        """After backward: each halo row's gradient back to its owner, arriving next epoch."""
        part = self.part
        for layer, halo in self.halo_leaf.items():
            grad = halo.grad if halo.grad is not None else torch.zeros_like(halo)
            back = grad.new_empty(sum(part.send_counts), grad.shape[1])
            self._start(("grads", layer), grad.contiguous(), part.recv_counts, back, part.send_counts)
            self.grad_in[layer] = back


class _InjectGrad(torch.autograd.Function):
    """Identity forward; backward adds ``fetch()`` at ``index`` (stale remote gradients, fetched
    only when backward gets here)."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, index: torch.Tensor, fetch) -> torch.Tensor:
        ctx.save_for_backward(index)
        ctx.fetch = fetch
        return h.view_as(h)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (index,) = ctx.saved_tensors
        return grad.index_add(0, index, ctx.fetch()), None, None


@dataclass
class Problem:
    """What one process trains on: its part, its rows and labels, the initial weights."""

    part: LocalGraph
    comm: Any
    evaluate: Exchange
    x: torch.Tensor
    y: torch.Tensor
    masks: dict[str, torch.Tensor]
    totals: dict[str, int]
    weights: dict[str, torch.Tensor]


def setup(dataset: str, partitioner: str, hidden: int, seed: int) -> Problem:
    """Run in each of K processes: load, partition (rank 0, broadcast) and build this part.

    Example (inside a rank):
        >>> problem = setup("cora", "metis", hidden=16, seed=0)      # doctest: +SKIP
        >>> problem.x.shape[0] == len(problem.part.owned)            # doctest: +SKIP
        True
    """
    import torch.distributed as dist

    from ..comm.collectives import Comm

    graph, x, labels, w = load_problem(dataset, "gcn", hidden, seed)
    assignment = shared_assignment(graph, partitioner, seed)
    comm = Comm()
    evaluate = Exchange("sync", graph, assignment, dist.get_rank(), comm)
    part = evaluate.part
    masks = {m: graph.ndata[f"{m}_mask"][part.owned] for m in ("train", "val", "test")}
    totals = {m: int(graph.ndata[f"{m}_mask"].sum()) for m in masks}
    return Problem(part, comm, evaluate, x[part.owned], labels[part.owned], masks, totals, w)


def fit(problem: Problem, mode: str, epochs: int, lr: float | None = None, weight_decay: float | None = None,
        eval_every: int = 0, record_epochs: int = 0, link: dict[str, float] | None = None) -> dict[str, Any]:
    """Train from ``problem``'s initial weights for ``epochs`` epochs with ``mode``'s exchange; every
    message is waited for before it returns.  Returns the global losses, seconds per epoch, the
    time spent waiting for the exchange and in the gradient all-reduce, the weights every
    ``eval_every`` epochs and (``record_epochs``) the layer-1 rows and gradients used and sent.

    ``link`` (``{"bandwidth": bytes/s, "latency": s}``, both modes alike): every boundary exchange
    into this process takes at least the wire time of that link (:mod:`gnnbook.comm.emulated_link`, a
    model); ``link_modeled_s`` / ``link_slept_s`` / ``link_bytes`` are then the modelled wire time
    of the run's exchanges, the part of it the process waited for, and the bytes modelled.

    Example (inside a rank):
        >>> out = fit(setup("cora", "metis", 16, 0), "pipe", epochs=5)   # doctest: +SKIP
        >>> len(out["epoch_s"])                                          # doctest: +SKIP
        5
    """
    # None: TRAIN_DEFAULTS' (train and time_modes pass theirs on)
    lr, weight_decay = adam_settings("gcn", lr, weight_decay)
    part, comm = problem.part, problem.comm
    emulated = EmulatedLink.from_spec(link)
    if emulated is not None:
        comm = LinkedComm(comm, emulated)
    pipe = PipeExchange(part, comm, emulated)
    seconds = [0.0]
    used, sent, grads_used, grads_sent = [], [], [], []

    def blocking(h: torch.Tensor, epoch: int, layer: int) -> torch.Tensor:
        halo = HaloExchange.apply(h, part, comm, seconds)
        if epoch < record_epochs and layer == 1:
            used.append(halo.detach().clone())
        return torch.sparse.mm(part.adjacency, torch.cat([h, halo]))

    def stale(h: torch.Tensor, epoch: int, layer: int) -> torch.Tensor:
        out = pipe(h, epoch, layer)
        if epoch < record_epochs and layer == 1:
            used.append(pipe.halo_leaf[1].detach().clone())
        return out

    aggregate = blocking if mode == "sync" else stale
    masks, totals, x_own, y_own = problem.masks, problem.totals, problem.x, problem.y
    w = {name: t.detach().clone().requires_grad_(True) for name, t in problem.weights.items()}
    opt = torch.optim.Adam(w.values(), lr=lr, weight_decay=weight_decay)
    losses, epoch_s, snapshots, reduce_s = [], [], {}, 0.0
    for epoch in range(epochs):
        start = time.perf_counter()
        opt.zero_grad()
        if epoch < record_epochs:
            sent.append((x_own @ w["W1"]).detach()[part.send_index].clone())
        logits = gcn_forward(w, x_own, aggregate, epoch)
        loss = F.cross_entropy(logits[masks["train"]], y_own[masks["train"]], reduction="sum") / totals["train"]
        loss.backward()
        if mode == "pipe":
            if epoch < record_epochs:       # backward waited for them (they are added there)
                grads_used.append(pipe.grad_in[1].clone() if 1 in pipe.grad_in else None)
            pipe.send_gradients()
            if epoch < record_epochs:
                grads_sent.append(pipe.halo_leaf[1].grad.clone())
        reduce_start = time.perf_counter()
        losses.append(sum_gradients_and_loss(w, loss, comm.all_reduce))
        reduce_s += time.perf_counter() - reduce_start
        opt.step()
        epoch_s.append(time.perf_counter() - start)
        if eval_every and ((epoch + 1) % eval_every == 0 or epoch == epochs - 1):
            snapshots[epoch + 1] = {n: t.detach().clone() for n, t in w.items()}
    pipe.wait()                          # the last epoch's messages
    link_counts = {} if emulated is None else dict(link_modeled_s=emulated.modeled_s, link_slept_s=emulated.slept_s,
                                                   link_bytes=emulated.bytes, link_exchanges=emulated.exchanges)
    return dict(losses=losses, epoch_s=epoch_s, snapshots=snapshots,
                wait_s=pipe.waits_s if mode == "pipe" else seconds[0],
                allreduce_s=reduce_s, used=used, sent=sent, grads_used=grads_used, grads_sent=grads_sent, **link_counts)


def global_val_test_accuracy(problem: Problem, weights: dict[str, torch.Tensor],
                             epoch: int = 0) -> tuple[float, float]:
    """Collective: global validation and test accuracy of ``weights``, a synchronous forward."""
    totals = problem.totals
    with torch.no_grad():
        logits = gcn_forward(weights, problem.x, problem.evaluate, epoch)
    correct = global_correct(logits, problem.y, problem.masks)
    return float(correct[0]) / totals["val"], float(correct[1]) / totals["test"]


def train(dataset: str = "cora", mode: str = "pipe", partitioner: str = "metis", epochs: int = 100,
          eval_every: int = 10, record_epochs: int = 0, hidden: int = 16, lr: float | None = None,
          weight_decay: float | None = None, seed: int = 0, link: dict[str, float] | None = None) -> StaleRank:
    """Run in each of K processes: GCN training, ``mode`` ``"sync"`` or ``"pipe"``.  Returns the
    global losses, seconds per epoch, the bytes measured over the run, the accuracy at the best
    validation epoch, and (``record_epochs``) the layer-1 rows used and sent.  ``link``: an emulated
    link for the boundary exchange (see :func:`fit`).

    More than 8 parameters: a rank's entry point for gnnbook.base.launch.run, whose arguments arrive in each
    process as JSON: each knob is its own argument (no settings objects across processes).
    """
    import torch.distributed as dist

    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    EmulatedLink.from_spec(link)         # a bad spec fails here, before any training
    problem = setup(dataset, partitioner, hidden, seed)
    comm, part = problem.comm, problem.part
    with comm.window("training"):
        out = fit(problem, mode, epochs, lr, weight_decay, eval_every, record_epochs, link)
    summary = comm.summary()
    curve = AccuracyCurve()
    with torch.no_grad(), comm.window("evaluate"):
        for ep, weights in out.pop("snapshots").items():
            val, test = global_val_test_accuracy(problem, weights, ep)
            curve.add(ep, val, test)
    ops = summary["by_op"]
    halo_expected = sum(ops[o]["expected_sent"] for o in ("send", "recv", "all_to_all") if o in ops)
    halo_payload = sum(ops[o]["payload_sent"] for o in ("send", "recv", "all_to_all") if o in ops)
    return StaleRank(rank=dist.get_rank(), mode=mode, curve=curve,
                     training_wire_sent=comm.windows["training"][0],
                     all_reduce_expected=ops["all_reduce"]["expected_sent"],
                     halo_expected_sent=halo_expected, halo_payload_sent=halo_payload,
                     halo_rows_sent=sum(part.send_counts), halo_rows_received=sum(part.recv_counts),
                     send_counts=part.send_counts, recv_counts=part.recv_counts, **out)


def time_modes(dataset: str = "cora", pairs: int = 3, epochs: int = 30, partitioner: str = "metis",
               hidden: int = 16, lr: float | None = None, weight_decay: float | None = None, seed: int = 0,
               link: dict[str, float] | None = None) -> ModeTimings:
    """Run in each of K processes: timing runs of both modes in one process, alternating
    ``sync, pipe, sync, ..., sync`` (``pairs`` PipeGCN runs, each between two synchronous ones), every
    run ``epochs`` epochs from the same initial weights.  One setup for all: the runs differ only
    in their exchange and in when they ran.  Returns ``modes`` and, per run, the seconds of every
    epoch, the seconds spent waiting for the exchange and those spent in the gradient all-reduce, and the
    global losses and test accuracy after the last epoch.  With a ``link``, the same sequence runs
    twice in the same processes: first over loopback, then with every boundary exchange (both modes
    alike) taking at least that emulated link's wire time (:func:`fit`); ``linked`` says which runs
    had it, and per run ``link_modeled_s`` (the modelled wire time), ``link_slept_s`` (the part of it
    the process waited for: not hidden) and ``link_bytes`` (0 without the link).

    Example:
        >>> out = run("gnnbook.ch6_fullgraph.stale:time_modes", 2, dict(pairs=2, epochs=20))   # doctest: +SKIP
        >>> out[0].modes                                                                  # doctest: +SKIP
        ['sync', 'pipe', 'sync', 'pipe', 'sync']

    More than 8 parameters: a rank's entry point for gnnbook.base.launch.run, whose arguments arrive in each
    process as JSON: each knob is its own argument (no settings objects across processes).
    """
    import torch.distributed as dist

    if not (isinstance(pairs, int) and pairs >= 1 and epochs >= 2):
        raise ValueError(f"time_modes needs pairs >= 1 and epochs >= 2, got {pairs!r}, {epochs!r}")
    EmulatedLink.from_spec(link)
    problem = setup(dataset, partitioner, hidden, seed)
    modes = ["sync", "pipe"] * pairs + ["sync"]
    links = [None] * len(modes) + ([link] * len(modes) if link is not None else [])
    modes = modes * (len(links) // len(modes))
    runs = []
    for mode, spec in zip(modes, links):
        dist.barrier()                   # every run starts together
        runs.append(fit(problem, mode, epochs, lr, weight_decay, eval_every=epochs, link=spec))
        runs[-1]["test_acc"] = global_val_test_accuracy(problem, runs[-1].pop("snapshots")[epochs], epochs)[1]
    keys = ["epoch_s", "wait_s", "allreduce_s", "losses", "test_acc"]
    link_keys = ["link_modeled_s", "link_slept_s", "link_bytes"]
    return ModeTimings(rank=dist.get_rank(), modes=modes, linked=[spec is not None for spec in links], link=link,
                       **{key: [run[key] for run in runs] for key in keys},
                       **{key: [run.get(key, 0) for run in runs] for key in link_keys})


def staleness(out: list[StaleRank]) -> dict[str, list[int]]:
    """From :func:`train`'s recorded rows (all ranks): for each recorded epoch ``t``, ``t - s``
    where ``s`` is the epoch whose rows the peers **sent** equal, bit for bit, the halo rows used
    in ``t`` (``embeddings``) and, for ``pipe``, whose halo gradients equal the gradients added in
    ``t`` (``gradients``; -1 where none were added).  Raises ValueError if nothing matches.

    Example:
        >>> staleness(out)            # doctest: +SKIP
        {'embeddings': [0, 1, 1], 'gradients': [-1, 1, 1]}
    """
    def lag(used: torch.Tensor, t: int, sent_by, seg_used, seg_sent) -> int:
        for s in range(t, -1, -1):
            if all(torch.equal(used[a:b], sent_by(j, s)[c:d]) for j, (a, b), (c, d) in zip(
                    range(len(out)), seg_used, seg_sent) if b > a):
                return t - s
        raise ValueError(f"epoch {t}: the rows used match no epoch's rows sent")

    def bounds(counts: list[int]) -> list[tuple[int, int]]:
        edges = [0]
        for c in counts:
            edges.append(edges[-1] + c)
        return list(zip(edges[:-1], edges[1:]))

    emb, grad = [], []
    for o in out:
        r = o.rank
        mine_in = bounds(o.recv_counts)
        their_out = [bounds(p.send_counts)[r] for p in out]
        emb.append([lag(u, t, lambda j, s: out[j].sent[s], mine_in, their_out) for t, u in enumerate(o.used)])
        mine_out = bounds(o.send_counts)
        their_in = [bounds(p.recv_counts)[r] for p in out]
        grad.append([-1 if g is None else 1 + lag(g, t - 1, lambda j, s: out[j].grads_sent[s], mine_out, their_in)
                     for t, g in enumerate(o.grads_used)])
    return {"embeddings": [max(col) for col in zip(*emb)],
            "gradients": [max(col) for col in zip(*grad)] if grad and grad[0] else []}


def run_stale(dataset: str = "cora", mode: str = "pipe", num_parts: int = 2, epochs: int = 100,
              deadline_s: float = 180.0, **options: Any) -> list[StaleRank]:
    """:func:`train` on ``num_parts`` real processes; the per-rank results."""
    from ..base.launch import run

    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    if num_parts < 2:
        raise ValueError(f"num_parts must be at least 2 (an exchange needs peers), got {num_parts}")
    return run("gnnbook.ch6_fullgraph.stale:train", num_parts,
               dict(dataset=dataset, mode=mode, epochs=epochs, **options), deadline_s=deadline_s)
