"""Checking a hand-written all-reduce against ``dist.all_reduce``, and timing collectives.

The lab's student writes ``ring_all_reduce(tensor, comm)`` in a file (the lab
cell is ``%%writefile``), and :func:`check_all_reduce` runs in every rank: it
loads the function from that file, gives it a :class:`PointToPoint` --
``send``/``recv``/``isend``/``irecv`` and nothing else -- and compares the
result with torch's own all-reduce.  It also measures what the rank's sockets
carried during the call (:class:`gnnbook.comm.Comm`): a real ring shows
exactly the bytes of its own messages plus gloo's headers; a shortcut through
``dist.all_reduce`` shows wire traffic that no ``send``/``recv`` explains.

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

P2P_OPS = ("send", "recv")


class PointToPoint:
    """Only point-to-point messages (counted, and measured on the wire); ``rank`` and ``world_size``.
    Collective: every rank creates it at the same point (see :class:`gnnbook.comm.Comm`)."""

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


def check_all_reduce(impl: str, sizes: list[int], seed: int = 0) -> list[dict[str, Any]]:
    """For each size: run ``impl`` (``"file.py:function"``) on a seeded random
    tensor and ``dist.all_reduce`` on a copy; return the largest difference,
    the payload of the implementation's messages, the bytes its sockets really
    carried (``wire_*``) and the bytes its messages explain (payload + gloo's headers)."""
    from gnnbook.parallel.worker import load_function

    rank = dist.get_rank()
    fn = load_function(impl)
    rows = []
    for size in sizes:
        tensor = torch.randn(size, generator=torch.Generator().manual_seed(seed + 7919 * rank + size))
        expected = tensor.clone()
        dist.all_reduce(expected)
        p2p = PointToPoint()                 # a quiet point: the wire is measured from here ...
        t0 = time.perf_counter()
        out = fn(tensor, p2p)
        seconds = time.perf_counter() - t0
        summary = p2p._counter.summary()     # ... to here, after every rank returned
        out = tensor if out is None else out
        ops = summary["by_op"]
        explained = [sum(ops[op][f"expected_{d}"] for op in P2P_OPS if op in ops) for d in ("sent", "received")]
        rows.append({"size": size, "bytes": size * tensor.element_size(), "max_error": float((out - expected).abs().max()),
                     "sent": summary["formula_sent"], "received": summary["formula_received"],
                     "wire_sent": summary["sent"], "wire_received": summary["received"],
                     "explained_sent": explained[0], "explained_received": explained[1],
                     "ops": sorted(ops), "seconds": seconds})
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
