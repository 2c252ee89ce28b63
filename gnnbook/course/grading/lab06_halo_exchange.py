"""Lab 6's grading code (book 6.1.1, ``labs/lab06_halo_exchange.ipynb``): one GCN layer with the student's halo exchange.

Book: 6.1.1 subgraph-parallel training (lab 6).

Used in: labs/lab06_halo_exchange.ipynb.

The lab's checks call :func:`grade_exchange`, which runs :func:`check_exchange` in every rank of a
real process group: the first GCN layer ``A_hat (X W)`` on the rank's part, with the student's
exchange (the notebook cell that defines it, written to a file by
:func:`~gnnbook.base.worker.function_file`) giving the halo rows, then the backward pass; the
package's own exchanges (``LAB_REFERENCES["lab06_halo_exchange"]``) refuse to run meanwhile.  It
compares output and gradient with :func:`layer_reference` (DGL's ``GraphConv`` on the whole graph,
one process).  :func:`measure_package_exchange` runs the same layer with the package's exchange, so
that the byte prediction (task 2) is checked against the sockets whatever task 1 gives.

Example:
    >>> ref = layer_reference("cora", hidden=4)           # doctest: +SKIP
    >>> ref["out"].shape                                  # doctest: +SKIP
    torch.Size([2708, 4])
"""
from __future__ import annotations

import tempfile
from typing import Any, Callable

import dgl.nn as dglnn
import torch
import torch.distributed as dist

from ...base.launch import run
from ...base.worker import function_file, load_function
from ...ch6_fullgraph.subgraph import HaloExchange, load_problem, local_graph, shared_assignment
from ...comm.collectives import Comm
from ..labcheck import LAB_REFERENCES, reference_forbidden

__all__ = ["check_exchange", "grade_exchange", "layer_reference", "measure_package_exchange", "package_exchange"]


def _layer_problem(dataset: str, hidden: int, seed: int):
    graph, x, _, w = load_problem(dataset, "gcn", hidden, seed)
    target = torch.randn(graph.num_nodes(), hidden, generator=torch.Generator().manual_seed(seed + 1))
    return graph, x, w["W1"], target


def check_exchange(impl: str, dataset: str = "cora", partitioner: str = "metis", hidden: int = 16,
                   seed: int = 0, refuse_references: bool = True) -> dict[str, Any]:
    """Run in each rank: the first GCN layer ``A_hat (X W)`` on this part with the halo exchange
    ``impl`` (``"file.py:function"``, called as ``function(h, part, comm)`` -> the halo rows, in
    the order of ``part.halo``), then backward of ``sum(out * target)``.  Returns the output rows,
    this rank's share of ``W``'s gradient, and the bytes its sockets carried meanwhile; the
    package's exchanges refuse to run while ``impl`` does (unless ``refuse_references`` is off)."""
    exchange = load_function(impl)
    graph, x, w1, target = _layer_problem(dataset, hidden, seed)
    part = local_graph(graph, shared_assignment(graph, partitioner, seed), dist.get_rank(), "gcn")
    weight = w1.clone().requires_grad_(True)
    comm = Comm()
    refused = LAB_REFERENCES["lab06_halo_exchange"] if refuse_references else ()
    with reference_forbidden(refused, hint="write the all_to_all_single calls yourself"):
        with comm.window("layer"):
            h = x[part.owned] @ weight
            out = torch.sparse.mm(part.adjacency, torch.cat([h, exchange(h, part, comm)]))
            (out * target[part.owned]).sum().backward()
    summary = comm.summary()
    return dict(owned=part.owned, out=out.detach(), grad=weight.grad, wire_sent=comm.windows["layer"][0],
                halo=len(part.halo), rows_sent=sum(part.send_counts), rows_received=sum(part.recv_counts),
                ops={op: row["calls"] for op, row in summary["by_op"].items()},
                payload_sent=summary["payload_sent"], headers_sent=summary["headers_sent"])


def layer_reference(dataset: str = "cora", hidden: int = 16, seed: int = 0) -> dict[str, torch.Tensor]:
    """:func:`check_exchange`'s layer in one process with DGL's ``GraphConv``: output and gradient."""
    graph, x, w1, target = _layer_problem(dataset, hidden, seed)
    weight = w1.clone().requires_grad_(True)
    out = dglnn.GraphConv(x.shape[1], hidden, weight=False, bias=False)(graph, x @ weight)
    (out * target).sum().backward()
    return dict(out=out.detach(), grad=weight.grad)


def package_exchange(h: torch.Tensor, part, comm) -> torch.Tensor:
    """The package's :class:`HaloExchange` with the lab's signature (for :func:`measure_package_exchange`)."""
    return HaloExchange.apply(h, part, comm, [0.0])


def _graded_run(impl: str, refuse: bool, num_parts: int, dataset: str, partitioner: str, hidden: int,
                seed: int, deadline_s: float) -> dict[str, Any]:
    out = run("gnnbook.course.grading.lab06_halo_exchange:check_exchange", num_parts,
              {"impl": impl, "dataset": dataset, "partitioner": partitioner, "hidden": hidden, "seed": seed,
               "refuse_references": refuse}, deadline_s=deadline_s)
    ref = layer_reference(dataset, hidden, seed)
    rows = [dict(rank=r, owned=len(o["owned"]), halo=o["halo"], rows_sent=o["rows_sent"],
                 rows_received=o["rows_received"],
                 max_out_error=float((o["out"] - ref["out"][o["owned"]]).abs().max()), wire_sent=o["wire_sent"],
                 calls=", ".join(f"{op} x{n}" for op, n in o["ops"].items()))
            for r, o in enumerate(out)]
    return dict(rows=rows, grad_error=float((sum(o["grad"] for o in out) - ref["grad"]).abs().max()),
                out_error=max(r["max_out_error"] for r in rows))


def grade_exchange(fn: Callable[..., Any], num_parts: int = 2, dataset: str = "cora", partitioner: str = "metis",
                   hidden: int = 16, seed: int = 0, deadline_s: float = 120.0) -> dict[str, Any]:
    """What lab 6's checks measure: the notebook function ``fn`` as the exchange of the layer in
    ``num_parts`` real processes, the package's exchanges refused.  Returns one row per rank
    (``max_out_error``, ``wire_sent``, rows sent and received), the largest output error
    (``out_error``) and the error of the summed weight gradient (``grad_error``)."""
    impl = function_file(fn, tempfile.mkdtemp(prefix="lab06-check-"))
    return _graded_run(impl, True, num_parts, dataset, partitioner, hidden, seed, deadline_s)


def measure_package_exchange(num_parts: int = 2, dataset: str = "cora", partitioner: str = "metis",
                             hidden: int = 16, seed: int = 0, deadline_s: float = 120.0) -> dict[str, Any]:
    """:func:`grade_exchange`'s measurement with the package's exchange: the bytes a correct
    exchange puts on each rank's sockets (what lab 6's byte prediction is checked against)."""
    impl = "gnnbook.course.grading.lab06_halo_exchange:package_exchange"
    return _graded_run(impl, False, num_parts, dataset, partitioner, hidden, seed, deadline_s)
