"""Asynchronous full-graph training with one-epoch-stale boundaries, PipeGCN-style (book 6.3).

PipeGCN (Wan et al., ICLR 2022) hides the halo exchange of subgraph-parallel
training (:mod:`gnnbook.fullgraph.subgraph`) behind computation: in epoch
``t`` every layer aggregates the halo rows its peers computed in epoch
``t - 1``, and every process adds to its own rows the halo gradients its peers
computed in epoch ``t - 1``.  So the exchange that epoch ``t`` starts (its own
rows forward, its halo gradients back) is only needed in epoch ``t + 1`` and
travels while epoch ``t`` goes on computing: here with non-blocking
``isend`` / ``irecv`` (gloo runs them on its own threads), waited for only
when the next epoch needs the rows.  Epoch 0 exchanges its rows before using
them (there is nothing older) and has no remote gradient yet.

:func:`train` runs either protocol in the same loop: ``"sync"`` (blocking
exchange, :class:`~gnnbook.fullgraph.subgraph.HaloExchange`) or ``"pipe"``.
Both send the same rows, so the payload per epoch is the synchronous one,
``2 x layers x halo rows x H x 4``; it is measured over the whole run (messages
are in flight across epoch boundaries, so there is no quiet point inside it).
With ``record_epochs`` the processes return the layer-1 halo rows they used
and the rows they sent; :func:`staleness` finds, for every epoch, which epoch's
rows were used: the staleness **measured**, not assumed.  :func:`time_modes` times
both modes in the same processes, alternating short runs, so that they see the same
machine.  Accuracy: weights are kept every ``eval_every`` epochs and evaluated after training with a
synchronous forward; the test accuracy at the best validation accuracy is
reported.

Example:
    >>> out = run_stale("cora", "pipe", epochs=20, record_epochs=5)      # doctest: +SKIP
    >>> staleness(out)["embeddings"]                                      # doctest: +SKIP
    [0, 1, 1, 1, 1]
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from gnnbook.fullgraph.protocols import Exchange, gcn_forward
from gnnbook.fullgraph.subgraph import HaloExchange, LocalGraph, load_problem, shared_assignment, sum_gradients_and_loss

MODES = ("sync", "pipe")


def _segments(counts: list[int]) -> list[tuple[int, int, int]]:
    out, start = [], 0
    for peer, c in enumerate(counts):
        if c:
            out.append((peer, start, start + c))
        start += c
    return out


class PipeExchange:
    """Stale halo rows and gradients for one process, layer by layer."""

    def __init__(self, part: LocalGraph, comm):
        self.part, self.comm = part, comm
        self.rows: dict[int, torch.Tensor] = {}          # halo rows to use this epoch, per layer
        self.pending: list[Any] = []                      # handles of the messages in flight
        self.buffers: list[torch.Tensor] = []             # their send buffers, alive until waited for
        self.halo_leaf: dict[int, torch.Tensor] = {}
        self.grad_in: dict[int, torch.Tensor] = {}        # gradients of my sent rows, from peers, last epoch
        self.waits_s = 0.0

    def _start(self, send: torch.Tensor, send_counts: list[int], recv: torch.Tensor, recv_counts: list[int]):
        for peer, a, b in _segments(recv_counts):
            self.pending.append(self.comm.irecv(recv[a:b], peer))
        for peer, a, b in _segments(send_counts):
            self.pending.append(self.comm.isend(send[a:b], peer))
        self.buffers.append(send)

    def wait(self) -> None:
        start = time.perf_counter()
        for handle in self.pending:
            handle.wait()
        self.pending, self.buffers = [], []
        self.waits_s += time.perf_counter() - start

    def begin_epoch(self) -> None:
        """Wait for last epoch's messages: their rows and gradients are this epoch's input."""
        self.wait()

    def __call__(self, h: torch.Tensor, epoch: int, layer: int) -> torch.Tensor:
        part = self.part
        sent = h.detach()[part.send_index].contiguous()
        fresh = h.new_empty(sum(part.recv_counts), h.shape[1])
        self._start(sent, part.send_counts, fresh, part.recv_counts)
        if epoch == 0:                      # nothing older: wait for this epoch's rows
            self.wait()
            self.rows[layer] = fresh.clone()
        halo = self.rows[layer].clone().requires_grad_(True)
        self.halo_leaf[layer] = halo
        self.rows[layer] = fresh            # filled in by the time next epoch begins
        if layer in self.grad_in:           # last epoch's gradients of the rows I sent
            h = _InjectGrad.apply(h, part.send_index, self.grad_in[layer])
        return torch.sparse.mm(part.adjacency, torch.cat([h, halo]))

    def send_gradients(self) -> None:
        """After backward: each halo row's gradient back to its owner, arriving next epoch."""
        part = self.part
        for layer, halo in self.halo_leaf.items():
            grad = halo.grad if halo.grad is not None else torch.zeros_like(halo)
            back = grad.new_empty(sum(part.send_counts), grad.shape[1])
            self._start(grad.contiguous(), part.recv_counts, back, part.send_counts)
            self.grad_in[layer] = back


class _InjectGrad(torch.autograd.Function):
    """Identity forward; backward adds ``grad_rows`` at ``index`` (stale remote gradients)."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, index: torch.Tensor, grad_rows: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(index, grad_rows)
        return h.view_as(h)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        index, grad_rows = ctx.saved_tensors
        return grad.index_add(0, index, grad_rows), None, None


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

    from gnnbook.comm import Comm

    graph, x, labels, w = load_problem(dataset, "gcn", hidden, seed)
    assignment = shared_assignment(graph, partitioner, seed)
    comm = Comm()
    evaluate = Exchange("sync", graph, assignment, dist.get_rank(), comm)
    part = evaluate.part
    masks = {m: graph.ndata[f"{m}_mask"][part.owned] for m in ("train", "val", "test")}
    totals = {m: int(graph.ndata[f"{m}_mask"].sum()) for m in masks}
    return Problem(part, comm, evaluate, x[part.owned], labels[part.owned], masks, totals, w)


def fit(problem: Problem, mode: str, epochs: int, lr: float = 0.01, weight_decay: float = 5e-4,
        eval_every: int = 0, record_epochs: int = 0) -> dict[str, Any]:
    """Train from ``problem``'s initial weights for ``epochs`` epochs with ``mode``'s exchange; every
    message is waited for before it returns.  Returns the global losses, seconds per epoch, the
    time spent waiting for the exchange and in the gradient all-reduce, the weights every
    ``eval_every`` epochs and (``record_epochs``) the layer-1 rows and gradients used and sent.

    Example (inside a rank):
        >>> out = fit(setup("cora", "metis", 16, 0), "pipe", epochs=5)   # doctest: +SKIP
        >>> len(out["epoch_s"])                                          # doctest: +SKIP
        5
    """
    part, comm = problem.part, problem.comm
    pipe = PipeExchange(part, comm)
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
        if mode == "pipe":
            pipe.begin_epoch()
            if epoch < record_epochs:
                grads_used.append(pipe.grad_in[1].clone() if 1 in pipe.grad_in else None)
        opt.zero_grad()
        if epoch < record_epochs:
            sent.append((x_own @ w["W1"]).detach()[part.send_index].clone())
        logits = gcn_forward(w, x_own, aggregate, epoch)
        loss = F.cross_entropy(logits[masks["train"]], y_own[masks["train"]], reduction="sum") / totals["train"]
        loss.backward()
        if mode == "pipe":
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
    return dict(losses=losses, epoch_s=epoch_s, snapshots=snapshots, wait_s=pipe.waits_s if mode == "pipe" else seconds[0],
                allreduce_s=reduce_s,
                used=used, sent=sent, grads_used=grads_used, grads_sent=grads_sent)


def train(dataset: str = "cora", mode: str = "pipe", partitioner: str = "metis", epochs: int = 100,
          eval_every: int = 10, record_epochs: int = 0, hidden: int = 16, lr: float = 0.01,
          weight_decay: float = 5e-4, seed: int = 0) -> dict[str, Any]:
    """Run in each of K processes: GCN training, ``mode`` ``"sync"`` or ``"pipe"``.  Returns the
    global losses, seconds per epoch, the bytes measured over the run, the accuracy at the best
    validation epoch, and (``record_epochs``) the layer-1 rows used and sent."""
    import torch.distributed as dist

    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    problem = setup(dataset, partitioner, hidden, seed)
    comm, part = problem.comm, problem.part
    with comm.window("training"):
        out = fit(problem, mode, epochs, lr, weight_decay, eval_every, record_epochs)
    summary = comm.summary()
    masks, totals = problem.masks, problem.totals
    curve, best = [], (-1.0, 0.0, -1)
    with torch.no_grad(), comm.window("evaluate"):
        for ep, weights in out.pop("snapshots").items():
            pred = gcn_forward(weights, problem.x, problem.evaluate, ep).argmax(1)
            correct = torch.tensor([float((pred[masks[m]] == problem.y[masks[m]]).sum()) for m in ("val", "test")])
            dist.all_reduce(correct)
            val, test = float(correct[0]) / totals["val"], float(correct[1]) / totals["test"]
            curve.append((ep, val, test))
            if val > best[0]:
                best = (val, test, ep)
    ops = summary["by_op"]
    halo_expected = sum(ops[o]["expected_sent"] for o in ("send", "recv", "all_to_all") if o in ops)
    halo_payload = sum(ops[o]["payload_sent"] for o in ("send", "recv", "all_to_all") if o in ops)
    return dict(rank=dist.get_rank(), mode=mode, curve=curve, best_val=best[0],
                test_at_best_val=best[1], best_epoch=best[2], final_test=curve[-1][2],
                training_wire_sent=comm.windows["training"][0], all_reduce_expected=ops["all_reduce"]["expected_sent"],
                halo_expected_sent=halo_expected, halo_payload_sent=halo_payload,
                halo_rows_sent=sum(part.send_counts), halo_rows_received=sum(part.recv_counts),
                send_counts=part.send_counts, recv_counts=part.recv_counts, **out)


def time_modes(dataset: str = "cora", pairs: int = 3, epochs: int = 30, partitioner: str = "metis",
               hidden: int = 16, lr: float = 0.01, weight_decay: float = 5e-4, seed: int = 0) -> dict[str, Any]:
    """Run in each of K processes: timing runs of both modes in one process, alternating
    ``sync, pipe, sync, ..., sync`` (``pairs`` PipeGCN runs, each between two synchronous ones), every
    run ``epochs`` epochs from the same initial weights.  One setup for all: the runs differ only
    in their exchange and in when they ran.  Returns ``modes`` and, per run, the seconds of every
    epoch, the seconds spent waiting for the exchange and those spent in the gradient all-reduce, and the
    global losses.

    Example:
        >>> out = run("gnnbook.fullgraph.stale:time_modes", 2, dict(pairs=2, epochs=20))   # doctest: +SKIP
        >>> out[0]["modes"]                                                               # doctest: +SKIP
        ['sync', 'pipe', 'sync', 'pipe', 'sync']
    """
    import torch.distributed as dist

    if not (isinstance(pairs, int) and pairs >= 1 and epochs >= 2):
        raise ValueError(f"time_modes needs pairs >= 1 and epochs >= 2, got {pairs!r}, {epochs!r}")
    problem = setup(dataset, partitioner, hidden, seed)
    modes = ["sync", "pipe"] * pairs + ["sync"]
    runs = []
    for mode in modes:
        dist.barrier()                   # every run starts together
        runs.append(fit(problem, mode, epochs, lr, weight_decay))
    return dict(rank=dist.get_rank(), modes=modes, **{key: [run[key] for run in runs]
                                                      for key in ("epoch_s", "wait_s", "allreduce_s", "losses")})


def staleness(out: list[dict[str, Any]]) -> dict[str, list[int]]:
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
        r = o["rank"]
        mine_in = bounds(o["recv_counts"])
        their_out = [bounds(p["send_counts"])[r] for p in out]
        emb.append([lag(u, t, lambda j, s: out[j]["sent"][s], mine_in, their_out) for t, u in enumerate(o["used"])])
        mine_out = bounds(o["send_counts"])
        their_in = [bounds(p["recv_counts"])[r] for p in out]
        grad.append([-1 if g is None else 1 + lag(g, t - 1, lambda j, s: out[j]["grads_sent"][s], mine_out, their_in)
                     for t, g in enumerate(o["grads_used"])])
    return {"embeddings": [max(col) for col in zip(*emb)],
            "gradients": [max(col) for col in zip(*grad)] if grad and grad[0] else []}


def run_stale(dataset: str = "cora", mode: str = "pipe", num_parts: int = 2, epochs: int = 100,
              deadline_s: float = 180.0, **options: Any) -> list[dict[str, Any]]:
    """:func:`train` on ``num_parts`` real processes; the per-rank results."""
    from gnnbook.parallel import run

    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    if num_parts < 2:
        raise ValueError(f"num_parts must be at least 2 (an exchange needs peers), got {num_parts}")
    return run("gnnbook.fullgraph.stale:train", num_parts, dict(dataset=dataset, mode=mode, epochs=epochs, **options),
               deadline_s=deadline_s)
