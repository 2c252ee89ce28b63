"""Skipping broadcasts of embeddings that changed little, Sancus-style (book 6.2.3).

Book: 6.2.3 efficient synchronous protocols (skipped broadcasts).

Used in: chapters/06c_sync_and_async_protocols.ipynb.

Sancus (Peng et al., VLDB 2022) lets a process skip broadcasting its boundary
embeddings in a layer when they have changed little since the last
broadcast; the receivers keep using the cached copy, and a **staleness
bound** forces a broadcast after at most ``bound`` skipped epochs.  Here, per
layer and epoch, a process compares the rows it would send with the rows it
last sent (relative Frobenius change); it sends when the change exceeds
``threshold`` or the bound is reached.  The decision travels first as one
integer per process (a tiny all-reduce, counted with the exchange's bytes), so
every receiver knows which peers send.  A cached row carries no gradient
back.  ``bound = 0`` never skips: exactly the synchronous halo exchange of
:mod:`gnnbook.ch6_fullgraph.subgraph`.  :func:`gnnbook.ch6_fullgraph.protocols.train`
runs it as ``protocol="sancus"``.

Example:
    >>> from gnnbook.ch6_fullgraph.protocols import run_protocol
    >>> out = run_protocol("cora", "sancus", threshold=0.05, bound=4)    # doctest: +SKIP
    >>> max(out[0]["sancus_skips"]) <= 4                                 # doctest: +SKIP
    True
"""
from __future__ import annotations

import torch

from .subgraph import HaloExchange, Plan, local_graph


def check_sancus(threshold: float, bound: int) -> None:
    """ValueError for a negative threshold or a bound that is not an integer >= 0."""
    if not threshold >= 0.0:
        raise ValueError(f"the change threshold must be >= 0, got {threshold!r}")
    if not (isinstance(bound, int) and bound >= 0):
        raise ValueError(f"the staleness bound must be an integer >= 0, got {bound!r}")


class SkipExchange:
    """One process's halo exchange that skips small changes, within a staleness bound."""

    def __init__(self, graph, assignment: torch.Tensor, rank: int, comm, threshold: float = 0.0, bound: int = 0):
        check_sancus(threshold, bound)
        self.part = local_graph(graph, assignment, rank, "gcn")
        self.comm, self.rank, self.threshold, self.bound = comm, rank, threshold, bound
        self.k = int(assignment.max()) + 1
        self.owner = assignment[self.part.halo]
        self.seconds = [0.0]
        self.rows_sent = 0
        self.last: dict[int, torch.Tensor] = {}     # rows last broadcast, per layer
        self.skips: dict[int, int] = {}             # consecutive skipped epochs, per layer
        self.cache: dict[int, torch.Tensor] = {}    # halo rows in use, per layer
        self.skip_history: list[int] = []           # consecutive skips after each call (this process)

    def __call__(self, h: torch.Tensor, epoch: int, layer: int) -> torch.Tensor:
        part = self.part
        block = h.detach()[part.send_index]
        last, skipped = self.last.get(layer), self.skips.get(layer, 0)
        if last is None or skipped >= self.bound:
            send = True
        else:
            change = float((block - last).norm() / last.norm().clamp(min=1e-12))
            send = change > self.threshold
        flags = torch.zeros(self.k, dtype=torch.int64)
        flags[self.rank] = int(send)
        self.comm.all_reduce(flags)
        plan = Plan(part.send_index if send else part.send_index[:0],
                    [c if send else 0 for c in part.send_counts],
                    [c if flags[j] else 0 for j, c in enumerate(part.recv_counts)])
        rows = HaloExchange.apply(h, plan, self.comm, self.seconds)
        fresh = torch.nonzero(flags[self.owner].bool()).flatten()
        old = self.cache.get(layer, h.new_zeros(len(part.halo), h.shape[1]))
        halo = old.detach().index_copy(0, fresh, rows)
        self.cache[layer] = halo.detach()
        if send:
            self.last[layer], self.skips[layer] = block, 0
        else:
            self.skips[layer] = skipped + 1
        self.skip_history.append(self.skips[layer])
        self.rows_sent += len(plan.send_index)
        return torch.sparse.mm(part.adjacency, torch.cat([h, halo]))
