"""Lab 6's checks (book 6.1.1, ``labs/lab06_halo_exchange.ipynb``): one GCN layer with the student's halo exchange.

Book: 6.1.1 subgraph-parallel training (lab 6).

Used in: labs/lab06_halo_exchange.ipynb.

The student writes ``halo_exchange(h, part, comm)`` (task 1) and ``predicted_bytes`` (task 2).  Here, in the
checker, :func:`layer_case` partitions the graph, draws random features, weight and target (not the
dataset's: a solution cannot rebuild them), and gives each rank only its own part's rows.  The student (in
the autograder a sandboxed process, which starts the ranks inside its sandbox; here the notebook) runs the
first GCN layer ``A_p [X_p W; halo]`` on real ranks with its exchange, then the backward pass
(:func:`~gnnbook.course.grading.ranks.lab06_rank`), and the checks compare output and summed weight gradient
with DGL's ``GraphConv`` on the whole graph, computed here (:func:`layer_reference`).  The byte prediction is
compared with the sockets of the package's exchange (:func:`measure_package_exchange`, run here), so that task
2 is graded whatever task 1 gives.

Example:
    >>> case = layer_case("cora", "random", num_parts=2, hidden=4, seed=0)      # doctest: +SKIP
    >>> layer_reference(case)["out"].shape                                      # doctest: +SKIP
    torch.Size([2708, 4])
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

import dgl
import dgl.nn as dglnn
import torch
import torch.distributed as dist

from ...base.launch import run
from ...ch6_fullgraph.partitioners import partition
from ...ch6_fullgraph.subgraph import HaloExchange, LocalGraph, load_problem, local_graph, shared_assignment
from ...comm.collectives import Comm
from ..vetting import Policy
from .engine import Check
from .ranks import LAB06_PRELUDE
from .student import Here, once_per_submission

__all__ = ["CHECKS", "Here", "POLICY", "PRELUDE", "check_backward", "check_forward", "check_predicted_bytes",
           "grade_exchange", "layer_case", "layer_reference", "measure_package_exchange"]

PRELUDE = LAB06_PRELUDE
# An all_to_all_single on the comm the check gives: torch.distributed and the package's exchanges and byte model
# are refused.
POLICY = Policy(modules=("torch", "math"), references=("HaloExchange", "PipeExchange", "gloo_bytes", "Volume",
                                                       "wire_sent", "wire_received", "PREAMBLE_BYTES"))
FEATURES = 32        # the width of the check's random features


@dataclass
class LayerCase:
    """One check of the layer: the graph, its parts, and the random features, weight and target."""

    graph: dgl.DGLGraph
    parts: list[LocalGraph]
    x: torch.Tensor
    weight: torch.Tensor
    target: torch.Tensor

    def rank_inputs(self) -> list[dict[str, Any]]:
        """What each rank gets: its part's structure and only its own rows of the features and target."""
        out = []
        for part in self.parts:
            adjacency = part.adjacency.coalesce()
            out.append({"owned": part.owned, "halo": part.halo, "send_index": part.send_index,
                        "send_counts": list(part.send_counts), "recv_counts": list(part.recv_counts),
                        "indices": adjacency.indices(), "values": adjacency.values(), "shape": list(adjacency.shape),
                        "x": self.x[part.owned], "weight": self.weight, "target": self.target[part.owned]})
        return out


def layer_case(dataset: str, partitioner: str, num_parts: int, hidden: int, seed: int) -> LayerCase:
    """``dataset``'s graph (prepared for GCN) in ``num_parts`` parts by ``partitioner``, with features, weight
    and target drawn from ``seed``."""
    graph = load_problem(dataset, "gcn", hidden, 0)[0]
    assignment = partition(graph, num_parts, partitioner, seed % 1000)
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(graph.num_nodes(), FEATURES, generator=generator)
    weight = torch.randn(FEATURES, hidden, generator=generator) / FEATURES ** 0.5
    target = torch.randn(graph.num_nodes(), hidden, generator=generator)
    return LayerCase(graph, [local_graph(graph, assignment, r, "gcn") for r in range(num_parts)], x, weight, target)


def layer_reference(case: LayerCase) -> dict[str, torch.Tensor]:
    """The case's layer in one process with DGL's ``GraphConv`` on the whole graph: output and weight gradient."""
    weight = case.weight.clone().requires_grad_(True)
    out = dglnn.GraphConv(FEATURES, weight.shape[1], weight=False, bias=False)(case.graph, case.x @ weight)
    (out * case.target).sum().backward()
    return {"out": out.detach(), "grad": weight.grad}


def grade_exchange(student, num_parts: int = 2, dataset: str = "cora", partitioner: str = "metis", hidden: int = 16,
                   seed: int = 0, deadline_s: float = 120.0) -> dict[str, Any]:
    """The student's exchange in the layer on ``num_parts`` real ranks: one row per rank (``max_out_error``
    against one process, ``wire_sent``, rows sent and received, the comm's calls), the largest output error
    (``out_error``, infinite when the halo has the wrong shape) and the error of the summed weight gradient
    (``grad_error``); errors are relative to the largest entry of the one-process output or gradient."""
    case = layer_case(dataset, partitioner, num_parts, hidden, seed)
    (replies,) = student.run([("lab06.layer", {"ranks": case.rank_inputs(), "deadline_s": deadline_s})])
    assert len(replies) == num_parts, f"{len(replies)} of {num_parts} ranks answered"
    ref = layer_reference(case)
    rows, grads, scale = [], [], float(ref["out"].abs().max())
    for rank, (part, reply) in enumerate(zip(case.parts, replies)):
        out = reply["out"]
        error = float((out - ref["out"][part.owned]).abs().max() / scale) if out is not None else float("inf")
        rows.append(dict(rank=rank, owned=len(part.owned), halo=len(part.halo), rows_sent=sum(part.send_counts),
                         rows_received=sum(part.recv_counts), returned=tuple(reply["halo_shape"]), max_out_error=error,
                         wire_sent=reply["wire_sent"], calls=", ".join(f"{op} x{n}" for op, n in reply["ops"].items())))
        grads.append(reply["grad"])
    if any(g is None for g in grads):
        grad_error = float("inf")
    else:
        grad_error = float((sum(grads) - ref["grad"]).abs().max() / ref["grad"].abs().max())
    return dict(rows=rows, out_error=max(r["max_out_error"] for r in rows), grad_error=grad_error)


def _cases(num_parts: int, partitioner: str, thorough: bool) -> list[tuple[int, str]]:
    # three random parts put nodes in the halo of two peers: their gradients must add up
    return [(max(num_parts, 2), partitioner)] + ([(3, "random")] if thorough else [])


def _seed(thorough: bool) -> int:
    """The notebook's checks use seed 0 (the same numbers run after run); grading draws a fresh one, so the
    features a solution sees cannot be known in advance."""
    return secrets.randbelow(2**31) if thorough else 0


def _shape_message(rows: list[dict]) -> str:
    bad = next((r for r in rows if not r["returned"] or r["returned"][0] != r["halo"]), None)
    return "" if bad is None else (f" (rank {bad['rank']} returned a halo of shape {bad['returned']}, its halo has "
                                   f"{bad['halo']} nodes: return one row per node of part.halo)")


def _worst(student, thorough: bool, num_parts: int, dataset: str, partitioner: str, hidden: int, deadline_s: float,
           error: str) -> tuple[str, dict[str, Any]]:
    """:func:`grade_exchange` over the check's cases: where ``error`` is largest, and that case's measurement."""
    graded = []     # one run of the ranks per submission and case: the forward and the backward check read it
    for parts, how in _cases(num_parts, partitioner, thorough):
        run_case = (lambda parts=parts, how=how:
                    grade_exchange(student, parts, dataset, how, max(hidden, 4), _seed(thorough), deadline_s))
        graded.append((f"{parts} processes, {how} parts",
                       once_per_submission(student, ("lab06.layer", parts, how, dataset, max(hidden, 4), thorough),
                                           run_case)))
    # NaN: worst
    return max(graded, key=lambda case: case[1][error] if case[1][error] == case[1][error] else float("inf"))


def check_forward(student, thorough: bool = False, num_parts: int = 2, dataset: str = "cora",
                  partitioner: str = "metis", hidden: int = 16, deadline_s: float = 120.0) -> dict[str, Any]:
    """Task 1: every rank's layer output equals the one-process layer (DGL's ``GraphConv``)."""
    case, graded = _worst(student, thorough, num_parts, dataset, partitioner, hidden, deadline_s, "out_error")
    assert graded["out_error"] < 1e-4, (
        f"{case}: your halo rows give outputs up to {graded['out_error']:.2e} (relative) away from one process"
        f"{_shape_message(graded['rows'])}: check the row order (part.halo: by owner, then id)")
    return {"out_error": graded["out_error"], "cases": len(_cases(num_parts, partitioner, thorough))}


def check_backward(student, thorough: bool = False, num_parts: int = 2, dataset: str = "cora",
                   partitioner: str = "metis", hidden: int = 16, deadline_s: float = 120.0) -> dict[str, Any]:
    """Task 1: the weight gradient summed over ranks equals the one-process gradient (a missing or wrong backward
    exchange leaves the halo's gradient away from its owner)."""
    case, graded = _worst(student, thorough, num_parts, dataset, partitioner, hidden, deadline_s, "grad_error")
    assert graded["grad_error"] < 1e-4, (
        f"{case}: the gradient differs by {graded['grad_error']:.2e} (relative): does backward send the halo "
        "gradients back to their owners and add them (a row can be in several halos)?")
    return {"grad_error": graded["grad_error"], "cases": len(_cases(num_parts, partitioner, thorough))}


def package_rank(dataset: str, partitioner: str, hidden: int, seed: int) -> dict[str, Any]:
    """In each rank (no student code): the layer with the package's :class:`HaloExchange`, and the bytes its
    sockets sent during it."""
    graph, x, _, w = load_problem(dataset, "gcn", hidden, seed)
    part = local_graph(graph, shared_assignment(graph, partitioner, seed), dist.get_rank(), "gcn")
    weight = w["W1"].clone().requires_grad_(True)
    comm = Comm()
    with comm.window("layer"):
        h = x[part.owned] @ weight
        out = torch.sparse.mm(part.adjacency, torch.cat([h, HaloExchange.apply(h, part, comm, [0.0])]))
        out.sum().backward()
    return {"rows_sent": sum(part.send_counts), "rows_received": sum(part.recv_counts),
            "wire_sent": comm.windows["layer"][0]}


def measure_package_exchange(num_parts: int = 2, dataset: str = "cora", partitioner: str = "metis",
                             hidden: int = 16, seed: int = 0, deadline_s: float = 120.0) -> list[dict[str, Any]]:
    """The bytes a correct exchange puts on each rank's sockets (:func:`package_rank` on ``num_parts`` ranks):
    what lab 6's byte prediction is checked against."""
    out = run(f"{__name__}:package_rank", num_parts,
              {"dataset": dataset, "partitioner": partitioner, "hidden": hidden, "seed": seed}, deadline_s=deadline_s)
    return [dict(rank=rank, **row) for rank, row in enumerate(out)]


def check_predicted_bytes(student, thorough: bool = False, num_parts: int = 2, dataset: str = "cora",
                          partitioner: str = "metis", hidden: int = 16, deadline_s: float = 120.0) -> dict[str, Any]:
    """Task 2: the student's ``predicted_bytes`` equals, on every rank, the bytes measured on the sockets."""
    cases = [(max(num_parts, 2), max(hidden, 4))] + ([(3, 8)] if thorough else [])
    for parts, width in cases:
        measured = measure_package_exchange(parts, dataset, partitioner, width, deadline_s=deadline_s)
        predicted = student.run([("lab06.predicted_bytes", {"rows_sent": r["rows_sent"],
                                                            "rows_received": r["rows_received"],
                                                            "hidden": width, "world_size": parts}) for r in measured])
        for r, p in zip(measured, predicted):
            assert p == r["wire_sent"], (f"{parts} processes, width {width}, rank {r['rank']}: predicted {p} B, "
                                         f"measured {r['wire_sent']} B")
    return {"measured": [r["wire_sent"] for r in measured], "predicted": predicted}


CHECKS = (Check(1, "the layer's output rows equal the one-process layer on every process", check_forward),
          Check(1, "the weight gradient summed over processes equals the one-process gradient", check_backward),
          Check(2, "the predicted bytes equal the bytes measured on every process's sockets", check_predicted_bytes))
