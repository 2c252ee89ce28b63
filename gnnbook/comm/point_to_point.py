"""Only point-to-point messages, counted and measured on the wire; and timing gloo's all-reduce (book 5.5.1).

Book: 5.5.1 collective communication (point-to-point only).

Used in: chapters/03_distributed_ml.ipynb, chapters/05d_communication.ipynb.

:class:`PointToPoint` hands a hand-written collective ``send``/``recv``/``isend``/``irecv`` and
nothing else, and measures what the rank's sockets carried (:class:`gnnbook.comm.collectives.Comm`):
chapter 5d's all-reduce algorithms (:mod:`gnnbook.comm.algorithms`) and lab 3's graded ring
(:mod:`gnnbook.course.grading.lab03_collectives`) run on it.  :func:`time_all_reduce` gives gloo's own
all-reduce time per message size (chapters 3 and 5d).

Example:
    >>> from gnnbook.base.launch import run
    >>> out = run("gnnbook.comm.point_to_point:time_all_reduce", 2, {"sizes": [1000], "repeats": 2})
    >>> out[0].sizes
    [1000]
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..base.records import record
from .collectives import Comm


@record
@dataclass
class AllReduceTimes:
    """What one rank of :func:`time_all_reduce` measured: gloo's all-reduce time per message size."""

    sizes: list[int]  # float32 elements per message
    seconds: list[float]  # median seconds of one all-reduce, per size
    world_size: int

class PointToPoint:
    """Only point-to-point messages (counted, and measured on the wire); ``rank`` and ``world_size``.
    Collective: every rank creates it at the same point (see :class:`gnnbook.comm.collectives.Comm`)."""

    def __init__(self) -> None:
        self._counter = Comm()
        self.rank, self.world_size = self._counter.rank, self._counter.world_size

    def send(self, t: torch.Tensor, dst: int) -> None:
        self._counter.send(t, dst)

    def recv(self, t: torch.Tensor, src: int) -> None:
        self._counter.recv(t, src)

    def isend(self, t: torch.Tensor, dst: int):
        return self._counter.isend(t, dst)

    def irecv(self, t: torch.Tensor, src: int):
        return self._counter.irecv(t, src)


def time_all_reduce(sizes: list[int], repeats: int = 5) -> AllReduceTimes:
    """Median seconds of ``dist.all_reduce`` (gloo) for float32 tensors of each size, as an :class:`AllReduceTimes`."""
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
    return AllReduceTimes(sizes=list(sizes), seconds=seconds, world_size=dist.get_world_size())
