"""Lab 3's checks (book 5.5.1, ``labs/lab03_collectives.ipynb``): a hand-written all-reduce, on real ranks.

Book: 5.5.1 collective communication (lab 3).

Used in: chapters/05d_communication.ipynb, labs/lab03_collectives.ipynb.

The student writes ``ring_all_reduce(tensor, comm)``.  The checks ask the student (in the autograder a
sandboxed process, which starts the ranks inside its sandbox; here the notebook) to run it on ``N``
real ranks (:func:`~gnnbook.course.grading.ranks.lab03_rank`): each rank sums a seeded tensor of its
own through a :class:`~gnnbook.comm.point_to_point.PointToPoint` (``send``/``recv``/``isend``/``irecv``
and nothing else) and reports its result, its messages' payload and what its sockets carried.  The
checks make every rank's tensor here, add them up, and compare: :func:`check_ring_sum` the sums,
:func:`check_ring_traffic` also that only the student's messages crossed the wire (a shortcut through
``dist.all_reduce`` shows wire bytes that no ``send``/``recv`` explains) and that each rank sent
``2(N-1)/N`` of the tensor.  :func:`check_all_reduce` is the same measurement against torch's own
all-reduce, for the lab's experiment and chapter 5d.

Example:
    >>> from gnnbook.base.launch import run
    >>> rows = run("gnnbook.course.grading.lab03_collectives:check_all_reduce", 2,
    ...            {"impl": "ring.py:ring_all_reduce", "sizes": [1000]})   # doctest: +SKIP
    >>> rows[0][0]["max_error"] < 1e-5                                      # doctest: +SKIP
    True
"""
from __future__ import annotations

import secrets
from typing import Any, Sequence

import torch.distributed as dist

from ...base.worker import load_function
from ..vetting import Policy
from .engine import Check
from .ranks import LAB03_PRELUDE, P2P_OPS, lab03_tensor, ring_row
from .student import Here, once_per_submission

__all__ = ["CHECKS", "Here", "P2P_OPS", "POLICY", "PRELUDE", "check_all_reduce", "check_ring_sum",
           "check_ring_traffic"]

PRELUDE = LAB03_PRELUDE
# Point-to-point messages on the comm the check gives: torch.distributed (and its collectives) is refused.
POLICY = Policy(modules=("torch", "math"),
                references=("all_reduce", "allreduce", "tree_all_reduce", "direct_all_reduce",
                            "reduce_scatter", "all_gather", "all_to_all"))


def check_all_reduce(impl: str, sizes: list[int], seed: int = 0) -> list[dict[str, Any]]:
    """In every rank: for each size, ``impl`` (``"file.py:function"``) on a seeded random tensor and
    ``dist.all_reduce`` on a copy: the largest difference, the messages' payload, the bytes the rank's
    sockets carried (``wire_*``) and the bytes its messages explain (payload + gloo's headers)."""
    fn = load_function(impl)
    rows = []
    for size in sizes:
        tensor = lab03_tensor(seed, dist.get_rank(), size)
        expected = tensor.clone()
        dist.all_reduce(expected)
        row = ring_row(fn, tensor)
        row["max_error"] = float((row.pop("result") - expected).abs().max())
        rows.append(row)
    return rows


def _sizes(thorough: bool) -> list[int]:
    """Sizes that 2 and 3 do and do not divide, and one large enough for the wire's headers to be < 1%."""
    return sorted([5, 7, 1000, 2**16 + 3] + ([333, 4097] if thorough else []))


def _ring_rows(student, world_sizes: Sequence[int], sizes: Sequence[int], thorough: bool, deadline_s: float
               ) -> list[dict]:
    """One launch per world size through the student; every rank's rows with ``N``, ``rank`` and ``max_error``
    against the sum of every rank's tensor, made here.  Both checks read one launch per submission (when grading,
    on tensors of a seed drawn for the submission, so that no rank can make its peers' tensors itself)."""
    key = ("lab03.ring", tuple(world_sizes), tuple(sizes), thorough)
    return once_per_submission(student, key, lambda: _launch_rings(student, world_sizes, sizes, thorough, deadline_s))


def _launch_rings(student, world_sizes: Sequence[int], sizes: Sequence[int], thorough: bool, deadline_s: float
                  ) -> list[dict]:
    seed = secrets.randbelow(2**31) if thorough else 0
    launches = student.run([("lab03.ring", {"world_size": n, "sizes": list(sizes), "seed": seed,
                                            "deadline_s": deadline_s})
                            for n in world_sizes])
    rows = []
    for n, per_rank in zip(world_sizes, launches):
        assert len(per_rank) == n, f"N={n}: {len(per_rank)} ranks answered"
        for size in sizes:
            expected = sum(lab03_tensor(seed, rank, size) for rank in range(n))
            for rank, results in enumerate(per_rank):
                row = next(r for r in results if r["size"] == size)
                got = row["result"]
                error = float((got - expected).abs().max()) if got.shape == expected.shape else float("inf")
                rows.append({k: v for k, v in row.items() if k != "result"}
                            | {"N": n, "rank": rank, "max_error": error})
    return rows


def check_ring_sum(student, thorough: bool = False, deadline_s: float = 90.0) -> dict[str, Any]:
    """Task 1: on 2 and 3 ranks every rank ends with the sum of all ranks' tensors, for sizes that N does and
    does not divide (``thorough``: two more)."""
    sizes = _sizes(thorough)
    for r in _ring_rows(student, [2, 3], sizes, thorough, deadline_s):
        assert r["max_error"] < 1e-4, (f"N={r['N']} rank {r['rank']}, {r['size']} floats: your all-reduce differs "
                                       f"from the sum of the ranks' tensors by {r['max_error']:.2e}")
    return {"sizes": len(sizes)}


def check_ring_traffic(student, thorough: bool = False, world_sizes: Sequence[int] = (2, 3),
                       sizes: Sequence[int] | None = None, deadline_s: float = 90.0) -> dict[str, Any]:
    """Task 1: only the student's messages crossed the wire (the sockets' bytes = the messages' payload + gloo's
    headers), each rank's messages carried ``2(N-1)/N`` of the tensor (chunks may differ by one float), and at
    the largest size the wire bytes are within 1% of ``2(N-1)/N`` of it (``sizes``: by default the sum's)."""
    sizes = _sizes(thorough) if sizes is None else sizes
    world_sizes, largest = sorted(set(world_sizes) | {2, 3}), max(max(sizes), 2**16 + 3)
    rows = _ring_rows(student, world_sizes, sorted(set(sizes) | {largest}), thorough, deadline_s)
    for r in rows:
        where, n = f"N={r['N']} rank {r['rank']} size {r['size']}", r["N"]
        assert r["max_error"] < 1e-4, f"{where}: your all-reduce differs from the sum by {r['max_error']:.2e}"
        assert set(r["ops"]) <= set(P2P_OPS), f"{where}: only send/recv are allowed, you called {sorted(r['ops'])}"
        for d in ("sent", "received"):
            assert r[f"wire_{d}"] == r[f"explained_{d}"], (
                f"{where}: the sockets {d} {r[f'wire_{d}']} bytes, your messages explain {r[f'explained_{d}']}: "
                f"the rest came from a collective (dist.all_reduce?). Build the ring from send/recv only.")
        formula, slack = 2 * (n - 1) / n * r["bytes"], 2 * (n - 1) * 4          # one float per step
        for d in ("sent", "received"):
            assert abs(r[d] - formula) <= slack, (f"{where}: payload {d} {r[d]:.0f}, expected {formula:.0f}; "
                                                  f"a ring sends each chunk 2(N-1) times in total, once per step")
    worst = {}
    for n in world_sizes:
        worst[n] = max(abs(r["wire_sent"] - 2 * (n - 1) / n * r["bytes"]) / (2 * (n - 1) / n * r["bytes"])
                       for r in rows if r["N"] == n and r["size"] == largest)
        assert worst[n] < 0.01, f"N={n}: wire bytes {100 * worst[n]:.2f}% away from 2(N-1)/N·size"
    return {"rows": rows, "largest": largest, "worst_rel": worst, "world_sizes": len(world_sizes)}


CHECKS = (Check(1, "the ring all-reduce sums every rank's tensor on 2 and 3 ranks", check_ring_sum),
          Check(1, "only the ring's send/recv crossed the wire, 2(N-1)/N of the tensor per rank", check_ring_traffic))
