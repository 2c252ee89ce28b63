"""Cheaper boundary exchanges for full-graph GCN training (book 6.2.2 and 6.2.3).

Book: 6.2.2 pre-aggregation; 6.2.3 efficient synchronous protocols.

Used in: chapters/06c_sync_and_async_protocols.ipynb.

:mod:`gnnbook.ch6_fullgraph.subgraph` sends, every layer, the embedding of every
halo vertex to every process that needs it (and its gradient back).  This
module trains the same two-layer GCN on ``K`` real processes with one of four
exchanges (``protocol``):

- ``"sync"``: the halo exchange of :mod:`~gnnbook.ch6_fullgraph.subgraph`, the baseline;
- ``"preagg"``: **pre-aggregation** (DistGNN, Md et al., SC 2021).  The owner
  of the remote in-neighbours of a target ``v`` sums their weighted rows
  *before* sending, so one row travels per (boundary target, source part)
  pair instead of one per halo vertex (or per cut edge, for a naive
  edge-wise exchange);
- ``"cdr"``: pre-aggregation with **delayed remote aggregates**, DistGNN's
  ``cd-r``: the boundary targets are split into ``r`` bins (``target id mod
  r``); in epoch ``e`` only bin ``e mod r`` is sent, the others reuse the
  partial aggregates received up to ``r - 1`` epochs earlier (no gradient
  flows through a reused row).  Epoch 0 sends every bin, so nothing is zero.
  ``r = 1`` is plain pre-aggregation;
- ``"bns"``: **boundary-node sampling** (BNS-GCN, Wan et al., MLSys 2022): each
  epoch keeps every boundary (halo) vertex with probability ``p``, the same
  draw on every process (a generator seeded by the epoch, so no ids travel);
  dropped halo vertices send nothing, kept ones are weighted ``1 / p`` so the
  aggregate stays unbiased.  ``p = 1`` is the synchronous exchange;
- ``"sancus"``: skip a broadcast whose rows changed little, within a staleness
  bound (Sancus, Peng et al., VLDB 2022; :mod:`gnnbook.ch6_fullgraph.sancus`).

Payload per epoch, summed over processes: ``2 x layers x rows x H x 4`` bytes
(rows forward, their gradients back), where ``rows`` is what the epoch
exchanged; :func:`exchange_bytes_formula`.  The sockets measure it
(:class:`gnnbook.comm.collectives.Comm`); gloo adds ``3 x 48`` bytes of headers per message,
``K - 1`` messages per exchange call.  Accuracy is judged fairly: every
``eval_every`` epochs a full synchronous forward (its own ``evaluate`` window,
not counted) gives validation and test accuracy; the test accuracy at the best
validation accuracy is reported.

Example:
    >>> out = run_protocol("cora", "cdr", r=4, epochs=50)                 # doctest: +SKIP
    >>> out[0].curve.test_at_best_val                                          # doctest: +SKIP
    0.79
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ..base.records import record
from ..graph.normalisation import gcn_edge_weights
from ..training.train import AccuracyCurve, adam_settings
from .sancus import SkipExchange, check_sancus
from .subgraph import (HaloExchange, LocalGraph, Plan, global_correct, load_problem, local_graph, shared_assignment,
                       sum_gradients_and_loss)

PROTOCOLS = ("sync", "preagg", "cdr", "bns", "sancus")


@record
@dataclass
class ProtocolRank:
    """What one of :func:`train`'s processes measured (:func:`run_protocol` lists them in rank order)."""

    rank: int
    protocol: str
    r: int  # CDR's delay
    p: float  # BNS's keep probability
    losses: list[float]  # the global training loss, per epoch
    rows_sent: list[int]  # forward rows this process sent, per epoch
    exchange_wire_sent: list[int]  # bytes its sockets carried for the exchange, per epoch
    epoch_s: list[float]
    curve: AccuracyCurve  # validation and test accuracy every eval_every epochs, and the best of them
    all_to_all_calls: int
    assignment: torch.Tensor  # every node's part
    exchange_seconds: float
    sancus_skips: list[int]  # Sancus: consecutive skips after each exchange call (empty for the other protocols)


def check_options(protocol: str, r: int = 1, p: float = 1.0) -> None:
    """ValueError for an unknown protocol, ``r < 1`` or ``p`` outside ``(0, 1]``."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; choose one of {', '.join(PROTOCOLS)}")
    if not (isinstance(r, int) and r >= 1):
        raise ValueError(f"the delay r must be an integer >= 1, got {r!r}")
    if not 0.0 < p <= 1.0:
        raise ValueError(f"the boundary sampling rate p must lie in (0, 1], got {p!r}")


@dataclass
class PreAggGraph:
    """One process's pre-aggregation layout.  Rows of ``partial`` are (peer, target) pairs, by
    peer then target id; ``scatter`` adds the received rows (same order, from the peers' view)
    into this process's targets."""

    local: torch.Tensor         # sparse (owned x owned): in-edges from own nodes
    partial: torch.Tensor       # sparse (pairs sent x owned): weighted sums for peers' targets
    send_targets: torch.Tensor  # global id of each sent row's target
    send_peers: torch.Tensor    # peer of each sent row
    recv_targets: torch.Tensor  # global id of each received row's target
    recv_peers: torch.Tensor    # peer each received row comes from
    scatter: torch.Tensor       # sparse (owned x pairs received) of ones


def preagg_graph(graph, assignment: torch.Tensor, rank: int) -> PreAggGraph:
    """Part ``rank``'s pre-aggregation layout for GCN (edge ``u -> v`` weighted
    ``1 / sqrt(out_deg(u) in_deg(v))``, degrees of the whole graph, already with self loops).

    Example:
        >>> pg = preagg_graph(g, assignment, 0)          # doctest: +SKIP
        >>> pg.partial.shape[0] == boundary_pairs(g, assignment)[0][0]   # doctest: +SKIP
        True
    """
    n = graph.num_nodes()
    owned = torch.nonzero(assignment == rank).flatten()
    position = torch.full((n,), -1, dtype=torch.int64)
    position[owned] = torch.arange(len(owned))
    # out-edges of my nodes: local ones into `local`, remote ones pre-summed per (peer, target)
    src, dst = graph.out_edges(owned)
    weight = gcn_edge_weights(src, dst, graph.out_degrees(), graph.in_degrees())
    home = assignment[dst] == rank
    local = torch.sparse_coo_tensor(torch.stack([position[dst[home]], position[src[home]]]), weight[home],
                                    (len(owned), len(owned))).coalesce()
    src, dst, weight = src[~home], dst[~home], weight[~home]
    keys, row = torch.unique(assignment[dst] * n + dst, return_inverse=True)      # by peer, then target id
    partial = torch.sparse_coo_tensor(torch.stack([row, position[src]]), weight,
                                      (len(keys), len(owned))).coalesce()
    # in-edges of my nodes from remote sources: one received row per (source part, target)
    src_in, dst_in = graph.in_edges(owned)
    remote = assignment[src_in] != rank
    rkeys = torch.unique(assignment[src_in[remote]] * n + dst_in[remote])
    scatter = torch.sparse_coo_tensor(torch.stack([position[rkeys % n], torch.arange(len(rkeys))]),
                                      torch.ones(len(rkeys)), (len(owned), len(rkeys))).coalesce()
    return PreAggGraph(local, partial, keys % n, keys // n, rkeys % n, rkeys // n, scatter)


def boundary_pairs(graph, assignment: torch.Tensor) -> tuple[list[int], int, list[int]]:
    """Per part: (boundary target, source part) pairs it receives; the number of cut edges; and
    the halo sizes -- the rows pre-aggregation, an edge-wise and a vertex-wise exchange move.

    Example:
        >>> pairs, cut, halo = boundary_pairs(g, assignment)          # doctest: +SKIP
        >>> sum(pairs) <= cut                                          # doctest: +SKIP
        True
    """
    n, k = graph.num_nodes(), int(assignment.max()) + 1
    src, dst = graph.edges()
    cut = assignment[src] != assignment[dst]
    pairs = torch.unique(assignment[src[cut]] * n + dst[cut])
    halos = torch.unique(assignment[dst[cut]] * n + src[cut])
    return (torch.bincount(assignment[pairs % n], minlength=k).tolist(), int(cut.sum()),
            torch.bincount(halos // n, minlength=k).tolist())


def exchange_bytes_formula(rows: int, hidden: int, layers: int = 2) -> int:
    """Payload of an epoch that exchanges ``rows`` rows per layer (summed over processes): each
    row once forward and its gradient once backward, float32.

    Example:
        >>> exchange_bytes_formula(1000, hidden=16)  # 2 directions x 2 layers x 1000 rows x 16 x 4 bytes
        256000
    """
    return 2 * layers * rows * hidden * 4


def _counts(peers: torch.Tensor, k: int) -> list[int]:
    return torch.bincount(peers, minlength=k).tolist()


class Exchange:
    """One protocol's aggregation ``A h`` for this process's nodes, epoch by epoch."""

    def __init__(self, protocol: str, graph, assignment: torch.Tensor, rank: int, comm, r: int = 1,
                 p: float = 1.0, seed: int = 0):
        check_options(protocol, r, p)
        self.protocol, self.comm, self.r, self.p, self.seed = protocol, comm, r, p, seed
        self.k, self.n = int(assignment.max()) + 1, graph.num_nodes()
        self.seconds = [0.0]
        self.rows_sent = 0             # forward rows this process sent, since the last reset
        self.cache: dict[int, torch.Tensor] = {}
        if protocol in ("sync", "bns"):
            self.part: LocalGraph = local_graph(graph, assignment, rank, "gcn")
            adj = self.part.adjacency
            if protocol == "bns" and p < 1.0:      # halo columns weighted 1/p: unbiased under sampling
                idx, val = adj.indices(), adj.values().clone()
                val[idx[1] >= len(self.part.owned)] /= p
                adj = torch.sparse_coo_tensor(idx, val, adj.shape).coalesce()
            self.adjacency = adj
            self.assignment = assignment
        else:
            self.pg = preagg_graph(graph, assignment, rank)

    def __call__(self, h: torch.Tensor, epoch: int, layer: int) -> torch.Tensor:
        if self.protocol in ("sync", "bns"):
            return self._halo(h, epoch)
        return self._preagg(h, epoch, layer)

    def _halo(self, h: torch.Tensor, epoch: int) -> torch.Tensor:
        part = self.part
        if self.protocol == "sync" or self.p >= 1.0:
            plan: Any = part
            halo = HaloExchange.apply(h, part, self.comm, self.seconds)
        else:       # the same draw on every process: generator seeded by (seed, epoch)
            keep = torch.rand(self.n, generator=torch.Generator().manual_seed(self.seed * 100_003 + epoch)) < self.p
            sent = keep[part.owned[part.send_index]]
            peers_out = torch.repeat_interleave(torch.arange(self.k), torch.tensor(part.send_counts))
            kept_halo = keep[part.halo]
            plan = Plan(part.send_index[sent], _counts(peers_out[sent], self.k),
                        _counts(self.assignment[part.halo][kept_halo], self.k))
            rows = HaloExchange.apply(h, plan, self.comm, self.seconds)
            halo = h.new_zeros(len(part.halo), h.shape[1]).index_copy(0, torch.nonzero(kept_halo).flatten(), rows)
        self.rows_sent += sum(plan.send_counts)
        return torch.sparse.mm(self.adjacency, torch.cat([h, halo]))

    def _preagg(self, h: torch.Tensor, epoch: int, layer: int) -> torch.Tensor:
        pg = self.pg
        partial = torch.sparse.mm(pg.partial, h)
        r = self.r if self.protocol == "cdr" else 1
        if r == 1 or epoch == 0:
            fresh_out = torch.ones(len(pg.send_targets), dtype=torch.bool)
            fresh_in = torch.ones(len(pg.recv_targets), dtype=torch.bool)
        else:
            fresh_out, fresh_in = pg.send_targets % r == epoch % r, pg.recv_targets % r == epoch % r
        plan = Plan(torch.nonzero(fresh_out).flatten(), _counts(pg.send_peers[fresh_out], self.k),
                    _counts(pg.recv_peers[fresh_in], self.k))
        rows = HaloExchange.apply(partial, plan, self.comm, self.seconds)
        self.rows_sent += len(plan.send_index)
        if r == 1:
            remote = rows
        else:
            where = torch.nonzero(fresh_in).flatten()
            old = self.cache.get(layer, rows.new_zeros(len(pg.recv_targets), rows.shape[1]))
            remote = old.index_copy(0, where, rows)          # fresh rows carry gradient, reused ones do not
            self.cache[layer] = remote.detach()
        return torch.sparse.mm(pg.local, h) + torch.sparse.mm(pg.scatter, remote)


def gcn_forward(w: dict[str, torch.Tensor], x: torch.Tensor, aggregate, epoch: int) -> torch.Tensor:
    """Two GCN layers, ``aggregate(h, epoch, layer)`` doing ``A h`` with its exchange."""
    h = torch.relu(aggregate(x @ w["W1"], epoch, 1) + w["b1"])
    return aggregate(h, epoch, 2) @ w["W2"] + w["b2"]


def train(dataset: str = "cora", protocol: str = "sync", partitioner: str = "metis", epochs: int = 100,
          r: int = 1, p: float = 1.0, eval_every: int = 10, hidden: int = 16, lr: float | None = None,
          weight_decay: float | None = None, seed: int = 0, threshold: float = 0.0, bound: int = 0) -> ProtocolRank:
    """Run in each of K processes: GCN training with ``protocol``'s exchange: the per-epoch global
    losses, forward rows sent, measured exchange bytes and seconds; the validation curve; the test
    accuracy at the best validation accuracy.

    More than 8 parameters: a rank's entry point for gnnbook.base.launch.run, whose arguments arrive in each
    process as JSON: each knob is its own argument (no settings objects across processes).
    """
    import torch.distributed as dist

    from ..comm.collectives import Comm

    lr, weight_decay = adam_settings("gcn", lr, weight_decay)
    check_options(protocol, r, p)
    rank = dist.get_rank()
    graph, x, labels, w = load_problem(dataset, "gcn", hidden, seed)
    assignment = shared_assignment(graph, partitioner, seed)
    comm = Comm()
    if protocol == "sancus":
        exchange: Any = SkipExchange(graph, assignment, rank, comm, threshold=threshold, bound=bound)
    else:
        exchange = Exchange(protocol, graph, assignment, rank, comm, r=r, p=p, seed=seed)
    evaluate = Exchange("sync", graph, assignment, rank, comm)
    owned = evaluate.part.owned
    masks = {m: graph.ndata[f"{m}_mask"][owned] for m in ("train", "val", "test")}
    totals = {m: int(graph.ndata[f"{m}_mask"].sum()) for m in masks}
    x_own, y_own = x[owned], labels[owned]
    w = {name: t.requires_grad_(True) for name, t in w.items()}
    opt = torch.optim.Adam(w.values(), lr=lr, weight_decay=weight_decay)
    losses, rows, wire, seconds, curve = [], [], [], [], AccuracyCurve()
    for epoch in range(epochs):
        exchange.rows_sent = 0
        before = comm.windows.get("exchange", (0, 0))[0]
        with comm.window("exchange"):
            start = time.perf_counter()
            opt.zero_grad()
            logits = gcn_forward(w, x_own, exchange, epoch)
            loss = F.cross_entropy(logits[masks["train"]], y_own[masks["train"]], reduction="sum") / totals["train"]
            loss.backward()
            elapsed = time.perf_counter() - start
        with comm.window("gradients"):
            start = time.perf_counter()
            losses.append(sum_gradients_and_loss(w, loss, comm.all_reduce))
            opt.step()
            seconds.append(elapsed + time.perf_counter() - start)
        rows.append(exchange.rows_sent)
        wire.append(comm.windows["exchange"][0] - before)
        if (epoch + 1) % eval_every == 0 or epoch == epochs - 1:
            with torch.no_grad(), comm.window("evaluate"):
                correct = global_correct(gcn_forward(w, x_own, evaluate, epoch), y_own, masks)
            val, test = float(correct[0]) / totals["val"], float(correct[1]) / totals["test"]
            curve.add(epoch + 1, val, test)
    summary = comm.summary()
    return ProtocolRank(rank=rank, protocol=protocol, r=r, p=p, losses=losses, rows_sent=rows, exchange_wire_sent=wire,
                        epoch_s=seconds, curve=curve, all_to_all_calls=summary["by_op"]["all_to_all"]["calls"],
                        assignment=assignment, exchange_seconds=exchange.seconds[0],
                        sancus_skips=getattr(exchange, "skip_history", []))


def run_protocol(dataset: str = "cora", protocol: str = "sync", num_parts: int = 2, epochs: int = 100,
                 r: int = 1, p: float = 1.0, deadline_s: float = 180.0, **options: Any) -> list[ProtocolRank]:
    """:func:`train` on ``num_parts`` real processes; the per-rank results.  Bad options raise
    ValueError before anything starts."""
    from ..base.launch import run

    check_options(protocol, r, p)
    if protocol == "sancus":
        check_sancus(options.get("threshold", 0.0), options.get("bound", 0))
    if num_parts < 2:
        raise ValueError(f"num_parts must be at least 2 (an exchange needs peers), got {num_parts}")
    args = dict(dataset=dataset, protocol=protocol, epochs=epochs, r=r, p=p, **options)
    return run("gnnbook.ch6_fullgraph.protocols:train", num_parts, args, deadline_s=deadline_s)
