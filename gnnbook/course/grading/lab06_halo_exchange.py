"""Lab 6's grading code (book 6.1.1, ``labs/lab06_halo_exchange.ipynb``): one GCN layer with the student's halo exchange.

Book: 6.1.1 subgraph-parallel training (lab 6).

Used in: labs/lab06_halo_exchange.ipynb.

The lab's check runs :func:`check_exchange` in every rank of a real process group: the first
GCN layer ``A_hat (X W)`` on the rank's part, with the student's exchange (a ``file.py:function``
the lab wrote) giving the halo rows, then the backward pass; the package's own
:class:`~gnnbook.ch6_fullgraph.subgraph.HaloExchange` is refused meanwhile.  The check compares
output and gradient with :func:`layer_reference` (DGL's ``GraphConv`` on the whole graph, one
process) and the bytes on the sockets with the rows the plan names.

Example:
    >>> ref = layer_reference("cora", hidden=4)           # doctest: +SKIP
    >>> ref["out"].shape                                  # doctest: +SKIP
    torch.Size([2708, 4])
"""
from __future__ import annotations

from typing import Any

import dgl.nn as dglnn
import torch
import torch.distributed as dist

from ...base.worker import load_function
from ...ch6_fullgraph.subgraph import load_problem, local_graph, shared_assignment
from ...comm.collectives import Comm
from ..labcheck import reference_forbidden

__all__ = ["EXCHANGE_REFERENCES", "check_exchange", "layer_reference"]

EXCHANGE_REFERENCES = ("gnnbook.ch6_fullgraph.subgraph:HaloExchange.forward",
                       "gnnbook.ch6_fullgraph.subgraph:HaloExchange.backward")


def _layer_problem(dataset: str, hidden: int, seed: int):
    graph, x, _, w = load_problem(dataset, "gcn", hidden, seed)
    target = torch.randn(graph.num_nodes(), hidden, generator=torch.Generator().manual_seed(seed + 1))
    return graph, x, w["W1"], target


def check_exchange(impl: str, dataset: str = "cora", partitioner: str = "metis", hidden: int = 16,
                   seed: int = 0) -> dict[str, Any]:
    """Run in each rank: the first GCN layer ``A_hat (X W)`` on this part with the halo exchange
    ``impl`` (``"file.py:function"``, called as ``function(h, part, comm)`` -> the halo rows, in
    the order of ``part.halo``), then backward of ``sum(out * target)``.  Returns the output rows,
    this rank's share of ``W``'s gradient, and the bytes its sockets carried meanwhile; the
    package's :class:`HaloExchange` refuses to run while ``impl`` does."""
    exchange = load_function(impl)
    graph, x, w1, target = _layer_problem(dataset, hidden, seed)
    part = local_graph(graph, shared_assignment(graph, partitioner, seed), dist.get_rank(), "gcn")
    weight = w1.clone().requires_grad_(True)
    comm = Comm()
    with reference_forbidden(EXCHANGE_REFERENCES, hint="write the all_to_all_single calls yourself"):
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
