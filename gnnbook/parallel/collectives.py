"""Checking a hand-written all-reduce against ``dist.all_reduce``, and timing collectives.

The lab's student writes ``ring_all_reduce(tensor, comm)`` in a file (the lab
cell is ``%%writefile``), and :func:`check_all_reduce` runs in every rank: it
loads the function from that file, gives it a :class:`PointToPoint` --
``send``/``recv``/``isend``/``irecv`` with byte counting and nothing else, so
the ring really has to be built from messages -- and compares the result with
torch's own all-reduce.

Example:
    >>> from gnnbook.parallel import run
    >>> out = run("gnnbook.parallel.collectives:time_all_reduce", 2, {"sizes": [1000], "repeats": 2})
    >>> out[0]["sizes"]
    [1000]
"""
from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

from gnnbook.comm import Comm


class PointToPoint:
    """Only point-to-point messages (counted); ``rank`` and ``world_size``."""

    def __init__(self) -> None:
        self._comm = Comm()
        self.rank, self.world_size = self._comm.rank, self._comm.world_size

    def send(self, t: torch.Tensor, dst: int) -> None:
        self._comm.send(t, dst)

    def recv(self, t: torch.Tensor, src: int) -> None:
        self._comm.recv(t, src)

    def isend(self, t: torch.Tensor, dst: int):
        return self._comm.isend(t, dst)

    def irecv(self, t: torch.Tensor, src: int):
        return self._comm.irecv(t, src)

    @property
    def sent(self) -> float:
        return self._comm.sent

    @property
    def received(self) -> float:
        return self._comm.received


def check_all_reduce(impl: str, sizes: list[int], seed: int = 0) -> list[dict[str, Any]]:
    """For each size: run ``impl`` (``"file.py:function"``) on a seeded random
    tensor and ``dist.all_reduce`` on a copy; return the largest difference and
    the bytes the implementation sent and received."""
    from gnnbook.parallel.worker import load_function

    rank = dist.get_rank()
    fn = load_function(impl)
    rows = []
    for size in sizes:
        tensor = torch.randn(size, generator=torch.Generator().manual_seed(seed + 7919 * rank + size))
        expected = tensor.clone()
        dist.all_reduce(expected)
        p2p = PointToPoint()
        dist.barrier()
        t0 = time.perf_counter()
        out = fn(tensor, p2p)
        seconds = time.perf_counter() - t0
        out = tensor if out is None else out
        rows.append({"size": size, "bytes": size * tensor.element_size(), "max_error": float((out - expected).abs().max()),
                     "sent": p2p.sent, "received": p2p.received, "seconds": seconds})
    return rows


def time_all_reduce(sizes: list[int], repeats: int = 5) -> dict[str, Any]:
    """Median seconds of ``dist.all_reduce`` (gloo) for float32 tensors of each size."""
    seconds = []
    for size in sizes:
        t = torch.ones(size)
        runs = []
        for _ in range(repeats):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            runs.append(time.perf_counter() - t0)
        seconds.append(sorted(runs)[len(runs) // 2])
    return {"sizes": list(sizes), "seconds": seconds, "world_size": dist.get_world_size()}
