"""Lab 3's grading code (book 5.5.1, ``labs/lab03_collectives.ipynb``): a hand-written all-reduce, checked.

Book: 5.5.1 collective communication (lab 3).

Used in: chapters/05d_communication.ipynb, labs/lab03_collectives.ipynb.

The student writes ``ring_all_reduce(tensor, comm)`` in a notebook cell, which
:func:`~gnnbook.base.worker.function_file` writes to a file; :func:`check_all_reduce` runs in
every rank, loads it, hands it a
:class:`~gnnbook.comm.point_to_point.PointToPoint` (``send``/``recv``/``isend``/``irecv`` and
nothing else) and compares its result with torch's own all-reduce.  It also measures what the
rank's sockets carried during the call: a real ring shows exactly the bytes of its own messages
plus gloo's headers; a shortcut through ``dist.all_reduce`` shows wire traffic that no
``send``/``recv`` explains.

Example:
    >>> from gnnbook.base.launch import run
    >>> rows = run("gnnbook.course.grading.lab03_collectives:check_all_reduce", 2,
    ...            {"impl": "ring.py:ring_all_reduce", "sizes": [1000]})   # doctest: +SKIP
    >>> rows[0][0]["max_error"] < 1e-5                                      # doctest: +SKIP
    True
"""
from __future__ import annotations

import tempfile
import time
from typing import Any, Callable

import torch
import torch.distributed as dist

from ...base.launch import run
from ...base.worker import function_file, load_function
from ...comm.point_to_point import PointToPoint
from ..labcheck import LAB_REFERENCES, reference_forbidden

__all__ = ["P2P_OPS", "check_all_reduce", "grade_ring"]

P2P_OPS = ("send", "recv")


def check_all_reduce(impl: str, sizes: list[int], seed: int = 0, refuse_references: bool = False) -> list[dict[str, Any]]:
    """For each size: run ``impl`` (``"file.py:function"``) on a seeded random
    tensor and ``dist.all_reduce`` on a copy; return the largest difference,
    the payload of the implementation's messages, the bytes its sockets really
    carried (``wire_*``) and the bytes its messages explain (payload + gloo's headers).
    With ``refuse_references`` the package's own all-reduces refuse to run meanwhile (a grade)."""
    rank = dist.get_rank()
    fn = load_function(impl)
    refused = LAB_REFERENCES["lab03_collectives"] if refuse_references else ()
    rows = []
    for size in sizes:
        tensor = torch.randn(size, generator=torch.Generator().manual_seed(seed + 7919 * rank + size))
        expected = tensor.clone()
        dist.all_reduce(expected)
        p2p = PointToPoint()                 # a quiet point: the wire is measured from here ...
        t0 = time.perf_counter()
        with reference_forbidden(refused, hint="build the ring from comm.isend / comm.recv yourself"):
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


def grade_ring(fn: Callable[..., Any], world_sizes: list[int], sizes: list[int], seed: int = 0,
               deadline_s: float = 90.0) -> list[dict[str, Any]]:
    """What lab 3's locked checks measure: :func:`check_all_reduce` on the notebook function ``fn``
    (its cell written to a fresh folder) in real processes, one launch per world size, with the
    package's and torch's all-reduces refused; one row per world size, rank and size."""
    impl = function_file(fn, tempfile.mkdtemp(prefix="lab03-check-"))
    rows = []
    for n in world_sizes:
        per_rank = run("gnnbook.course.grading.lab03_collectives:check_all_reduce", n,
                       {"impl": impl, "sizes": list(sizes), "seed": seed, "refuse_references": True},
                       deadline_s=deadline_s)
        rows += [dict(r, N=n, rank=rank) for rank, results in enumerate(per_rank) for r in results]
    return rows
