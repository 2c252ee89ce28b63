"""The student's side of the labs that run real ranks: each rank loads the solution itself and runs it.

Book: none (autograding; labs 3 and 6 are book 5.5.1 and 6.1.1).

Used in: labs/lab06_halo_exchange.ipynb.

Labs 3 and 6 reach it through their grading modules (lab 6 shows :func:`lab06_rank`).

A call of :mod:`.student` (``lab03.ring``, ``lab06.layer``) starts ``N`` real ranks with
:func:`gnnbook.base.launch.run` from the student's process (in the autograder: inside its sandbox).  Every
rank imports this module, loads the lab's prelude and the solution as the student's process does (the
package refused), runs the student's function on what the check gave it, and returns plain tensors.

Lab 6's ranks each get only their own part's inputs: the grader's features are random, drawn by the
check, and a rank reads its own file and deletes it, and every rank waits for the others to do the same,
before any solution code runs.  A halo row can then only come from its owner, through the exchange.

Example:
    >>> lab03_tensor(0, 1, 3).shape
    torch.Size([3])
"""
from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from ...base.launch import run
from ...base.worker import function_file
from ...comm.collectives import Comm
from ...comm.point_to_point import PointToPoint
from .student import PRELUDE_FILE, call, load_solution

LAB03_PRELUDE = "import torch\n"
LAB06_PRELUDE = "import torch\n"
P2P_OPS = ("send", "recv")


def _solution_files(ns: dict[str, Any], name: str, prelude: str, folder: Path) -> tuple[str, str]:
    """The prelude and solution files a rank loads: the student process's own (the autograder), or the
    notebook cell that defines ``name`` and the lab's prelude, written into ``folder`` (a notebook)."""
    if "__solution__" in ns:
        return ns["__solution__"]
    solution = function_file(ns[name], folder).rpartition(":")[0]
    (folder / PRELUDE_FILE).write_text(prelude)
    return str(folder / PRELUDE_FILE), solution


# ---- lab 3: a ring all-reduce from send and recv ---------------------------------------------------------

def lab03_tensor(seed: int, rank: int, size: int) -> torch.Tensor:
    """The tensor rank ``rank`` sums in lab 3's checks (the grader makes every rank's to know the sum)."""
    return torch.randn(size, generator=torch.Generator().manual_seed(seed + 7919 * rank + size))


def ring_row(fn: Callable[..., Any], tensor: torch.Tensor) -> dict[str, Any]:
    """``fn(tensor, comm)`` on a :class:`~gnnbook.comm.point_to_point.PointToPoint` (``send``/``recv``/``isend``/
    ``irecv`` and nothing else): the result, the payload of the messages, the bytes the rank's sockets really
    carried meanwhile (``wire_*``) and the bytes its messages explain (payload + gloo's headers)."""
    p2p = PointToPoint()                 # a quiet point: the wire is measured from here ...
    t0 = time.perf_counter()
    out = fn(tensor, p2p)
    seconds = time.perf_counter() - t0
    summary = p2p._counter.summary()     # ... to here, after every rank returned
    out = tensor if out is None else torch.as_tensor(out)
    ops = summary["by_op"]
    explained = [sum(ops[op][f"expected_{d}"] for op in P2P_OPS if op in ops) for d in ("sent", "received")]
    return {"size": tensor.numel(), "bytes": tensor.numel() * tensor.element_size(), "result": out.detach().clone(),
            "sent": summary["formula_sent"], "received": summary["formula_received"],
            "wire_sent": summary["sent"], "wire_received": summary["received"],
            "explained_sent": explained[0], "explained_received": explained[1], "ops": sorted(ops), "seconds": seconds}


def lab03_rank(prelude: str, solution: str, sizes: list[int], seed: int) -> list[dict[str, Any]]:
    """One rank of lab 3's checks: the solution loaded as the student's process loads it, then for every size
    :func:`ring_row` on this rank's :func:`lab03_tensor`."""
    import torch.distributed as dist

    fn = load_solution(Path(prelude), Path(solution))["ring_all_reduce"]
    return [ring_row(fn, lab03_tensor(seed, dist.get_rank(), size)) for size in sizes]


@call("lab03.ring")
def _lab03_ring(ns, world_size: int, sizes: list[int], seed: int, deadline_s: float) -> list[list[dict[str, Any]]]:
    """``world_size`` real ranks (started from here: in the autograder, inside the sandbox) run
    :func:`lab03_rank`; one list of rows per rank."""
    with tempfile.TemporaryDirectory(prefix="lab03-check-") as folder:
        prelude, solution = _solution_files(ns, "ring_all_reduce", LAB03_PRELUDE, Path(folder))
        return run(f"{__name__}:lab03_rank", world_size,
                   {"prelude": prelude, "solution": solution, "sizes": list(sizes), "seed": seed},
                   deadline_s=deadline_s)


# ---- lab 6: one GCN layer with the student's halo exchange -----------------------------------------------

def lab06_rank(prelude: str, solution: str, inputs: str) -> dict[str, Any]:
    """One rank of lab 6's checks: this rank's inputs (its file in ``inputs``, deleted once read; every rank
    waits for the others before the solution is loaded), then the first GCN layer ``A_p [X_p W; halo]`` with
    the student's ``halo_exchange`` and the backward pass of ``sum(out * target)``.  Returns the output rows,
    this rank's share of ``W``'s gradient, and what its sockets carried during the layer."""
    import torch.distributed as dist

    path = Path(inputs) / f"rank{dist.get_rank()}.pt"
    data = torch.load(path, weights_only=True)
    path.unlink()
    dist.barrier()
    exchange = load_solution(Path(prelude), Path(solution))["halo_exchange"]
    part = SimpleNamespace(owned=data["owned"], halo=data["halo"], send_index=data["send_index"],
                           send_counts=list(data["send_counts"]), recv_counts=list(data["recv_counts"]),
                           adjacency=torch.sparse_coo_tensor(data["indices"], data["values"],
                                                             tuple(data["shape"])).coalesce())
    weight = data["weight"].clone().requires_grad_(True)
    comm = Comm()
    with comm.window("layer"):
        h = data["x"] @ weight
        halo = torch.as_tensor(exchange(h, part, comm))
        fits = tuple(halo.shape) == (len(part.halo), h.shape[1])
        out = torch.sparse.mm(part.adjacency, torch.cat([h, halo])) if fits else None
        if out is not None:
            (out * data["target"]).sum().backward()
    summary = comm.summary()
    return {"halo_shape": list(halo.shape), "out": None if out is None else out.detach(),
            "grad": weight.grad, "wire_sent": comm.windows["layer"][0],
            "ops": {op: row["calls"] for op, row in summary["by_op"].items()}}


@call("lab06.layer")
def _lab06_layer(ns, ranks: list[dict[str, Any]], deadline_s: float) -> list[dict[str, Any]]:
    """``len(ranks)`` real ranks (in the autograder inside the sandbox) run :func:`lab06_rank`, each on its own
    inputs; one reply per rank."""
    with tempfile.TemporaryDirectory(prefix="lab06-check-") as folder:
        prelude, solution = _solution_files(ns, "halo_exchange", LAB06_PRELUDE, Path(folder))
        inputs = Path(folder) / "inputs"
        inputs.mkdir()
        for rank, data in enumerate(ranks):
            torch.save(data, inputs / f"rank{rank}.pt")
        return run(f"{__name__}:lab06_rank", len(ranks),
                   {"prelude": prelude, "solution": solution, "inputs": str(inputs)}, deadline_s=deadline_s)


@call("lab06.predicted_bytes")
def _lab06_predicted_bytes(ns, rows_sent: int, rows_received: int, hidden: int, world_size: int) -> int:
    return int(ns["predicted_bytes"](rows_sent, rows_received, hidden, world_size))


__all__ = ["LAB03_PRELUDE", "LAB06_PRELUDE", "P2P_OPS", "lab03_rank", "lab03_tensor", "lab06_rank", "ring_row"]
