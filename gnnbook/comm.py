"""Collectives over torch.distributed with a byte counter, and a link cost model.

:class:`Comm` wraps the torch.distributed calls the course uses and counts,
per rank, the bytes each call sends and receives:

- point-to-point (``send``/``recv``/``isend``/``irecv``) and
  ``all_to_all_single``: exactly the bytes of the tensors (or splits) that go
  to / come from *other* ranks;
- ``all_reduce``, ``all_gather_into_tensor``, ``reduce_scatter_tensor``,
  ``broadcast``: gloo does not report what its internal algorithm puts on the
  wire, so these are counted as the per-rank volume of the bandwidth-optimal
  (ring) algorithm: all-reduce of S bytes = 2(N-1)/N * S sent and received,
  all-gather / reduce-scatter of a full tensor of S bytes = (N-1)/N * S.
  That is a *model* of the wire traffic; the lab measures it for real by
  building the ring from ``send``/``recv``.

The second half is a cost model (clearly a model, not a measurement) of the
time a ring all-reduce takes on typical links.

Example:
    >>> ring_allreduce_bytes(100, 4)
    150.0
    >>> round(allreduce_time_s(1e9, 8, "NVLink (A100)"), 4)
    0.0059
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def ring_allreduce_bytes(size_bytes: float, world_size: int) -> float:
    """Bytes each rank sends (and receives) in a ring all-reduce of ``size_bytes``."""
    return 2 * (world_size - 1) / world_size * size_bytes


@dataclass
class Comm:
    """Counted torch.distributed calls for this rank.  ``sent`` / ``received``
    are totals; ``by_op`` splits them by call name.

    Example (inside a rank):
        >>> comm = Comm()                                   # doctest: +SKIP
        >>> comm.all_reduce(torch.ones(1000)); comm.sent     # doctest: +SKIP
        4000.0   # with 2 ranks: 2*(2-1)/2 * 4000 bytes
    """
    group: Any = None
    sent: float = 0.0
    received: float = 0.0
    calls: int = 0
    by_op: dict[str, list[float]] = field(default_factory=lambda: defaultdict(lambda: [0.0, 0.0, 0]))

    @property
    def rank(self) -> int:
        return dist.get_rank(self.group)

    @property
    def world_size(self) -> int:
        return dist.get_world_size(self.group)

    def _count(self, op: str, sent: float, received: float) -> None:
        self.sent += sent
        self.received += received
        self.calls += 1
        row = self.by_op[op]
        row[0] += sent
        row[1] += received
        row[2] += 1

    def summary(self) -> dict[str, Any]:
        return {"sent": self.sent, "received": self.received, "calls": self.calls,
                "by_op": {op: {"sent": s, "received": r, "calls": int(c)} for op, (s, r, c) in self.by_op.items()}}

    # ----- point to point: exact -----
    def send(self, t: torch.Tensor, dst: int) -> None:
        self._count("send", nbytes(t), 0)
        dist.send(t, dst, group=self.group)

    def recv(self, t: torch.Tensor, src: int | None = None) -> int:
        sender = dist.recv(t, src, group=self.group)
        self._count("recv", 0, nbytes(t))
        return sender

    def isend(self, t: torch.Tensor, dst: int):
        self._count("send", nbytes(t), 0)
        return dist.isend(t, dst, group=self.group)

    def irecv(self, t: torch.Tensor, src: int):
        self._count("recv", 0, nbytes(t))
        return dist.irecv(t, src, group=self.group)

    # ----- collectives -----
    def all_reduce(self, t: torch.Tensor, op=dist.ReduceOp.SUM, async_op: bool = False):
        volume = ring_allreduce_bytes(nbytes(t), self.world_size)
        self._count("all_reduce", volume, volume)
        return dist.all_reduce(t, op=op, group=self.group, async_op=async_op)

    def all_gather_into_tensor(self, out: torch.Tensor, shard: torch.Tensor) -> None:
        volume = (self.world_size - 1) * nbytes(shard)
        self._count("all_gather", volume, volume)
        dist.all_gather_into_tensor(out, shard, group=self.group)

    def reduce_scatter_tensor(self, out: torch.Tensor, full: torch.Tensor, op=dist.ReduceOp.SUM) -> None:
        volume = (self.world_size - 1) * nbytes(out)
        self._count("reduce_scatter", volume, volume)
        dist.reduce_scatter_tensor(out, full, op=op, group=self.group)

    def broadcast(self, t: torch.Tensor, src: int) -> None:
        volume = (self.world_size - 1) / self.world_size * nbytes(t)
        self._count("broadcast", volume, volume)
        dist.broadcast(t, src, group=self.group)

    def all_to_all_single(self, out: torch.Tensor, inp: torch.Tensor,
                          out_splits: list[int] | None = None, in_splits: list[int] | None = None) -> None:
        n, me = self.world_size, self.rank
        row_in = nbytes(inp) / max(inp.shape[0], 1)
        row_out = nbytes(out) / max(out.shape[0], 1)
        ins = in_splits if in_splits is not None else [inp.shape[0] // n] * n
        outs = out_splits if out_splits is not None else [out.shape[0] // n] * n
        self._count("all_to_all", row_in * (sum(ins) - ins[me]), row_out * (sum(outs) - outs[me]))
        dist.all_to_all_single(out, inp, out_splits, in_splits, group=self.group)

    def barrier(self) -> None:
        dist.barrier(group=self.group)


def total_bytes(summaries: list[dict[str, Any]], key: str = "sent") -> float:
    """Sum a per-rank counter field over ranks (``summaries`` from :meth:`Comm.summary`)."""
    return float(sum(s[key] for s in summaries))


# ----- a cost model of links (a MODEL: nominal unidirectional bandwidths and latencies) -----

LINKS: dict[str, dict[str, float]] = {
    # bandwidth in bytes/s per direction, latency in seconds (nominal figures)
    "NVLink (A100)": {"bandwidth": 300e9, "latency": 2e-6},
    "PCIe 4.0 x16": {"bandwidth": 32e9, "latency": 5e-6},
    "100 GbE (RDMA)": {"bandwidth": 12.5e9, "latency": 5e-6},
    "10 GbE (TCP)": {"bandwidth": 1.25e9, "latency": 50e-6},
}


def allreduce_time_s(size_bytes: float, world_size: int, link: str | dict[str, float]) -> float:
    """Modelled time of a ring all-reduce: 2(N-1) steps, each moving S/N bytes
    over the link: ``2(N-1) * (latency + S/(N*bandwidth))``.

    Example:
        >>> allreduce_time_s(0, 1, "10 GbE (TCP)")
        0.0
    """
    spec = LINKS[link] if isinstance(link, str) else link
    if world_size <= 1:
        return 0.0
    steps = 2 * (world_size - 1)
    return steps * (spec["latency"] + size_bytes / world_size / spec["bandwidth"])
