"""The student's side of the labs that train with the package's trainers: lab 4's step, lab 5b's history and forward.

Book: none (autograding; lab 4 is book 4.1.2, lab 5b book 5.2.3).

Used in: no notebook directly (labs 4 and 5b reach it through their grading modules).

The calls take a graph whose test labels the checker has already hidden (every test node labelled 0), so
neither the student's step (its ``labels``, the blocks' ``srcdata``) nor anything else in the student's
process sees them: the checker scores the returned logits.  The package's minibatch trainer runs here
with the student's step in place of its own; what it measures (peak memory of the training steps, time per
epoch, the best epoch) comes back as numbers.

Example:
    >>> "lab04.step" in CALLS and "lab05b.train" in CALLS
    True
"""
from __future__ import annotations

import gc
from types import SimpleNamespace
from typing import Any

import torch

from ...base.memory import exact_memory_unavailable_reason, release_free_memory, track_freed_memory
from ...base.seeding import set_seed
from ...ch5_minibatch import history as H
from ...models import build_model
from ...training.minibatch import Batches, neighbor_loader, train_minibatch
from ...training.train import Optim, model_input, prepare_graph
from .student import CALLS, call, choice_as_data, graph_from_payload

__all__ = ["CALLS", "LAB04_PRELUDE", "LAB05B_PRELUDE", "batch_payload"]

LAB04_PRELUDE = "import torch\nimport torch.nn.functional as F\n"


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


@call("lab04.step")
def _lab04_step(ns, graph: dict, batch_size: int, fanouts: list[int], model: str, seed: int, lr: float,
                options: dict) -> dict[str, Any]:
    """One call of the student's step on the first minibatch of the graph's training nodes (``-1`` fanouts: every
    neighbour), a dropout-free model in eval mode, plain SGD and stale gradients of 100 in every ``.grad``:
    the returned loss, the mode the model was left in, the weights before and after, and the seeds."""
    g = graph_from_payload(graph)
    feat, labels = g.ndata["feat"], g.ndata["label"]
    train_nodes = g.ndata["train_mask"].nonzero().squeeze(1)
    set_seed(seed)
    input_nodes, output_nodes, blocks = next(iter(neighbor_loader(g, train_nodes, list(fanouts), batch_size)))
    net = build_model(model, feat.shape[1], int(labels.max()) + 1, dropout=0.0, num_layers=len(fanouts), **options)
    before, seeds = _state(net), output_nodes.clone()
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    for param in net.parameters():
        param.grad = torch.full_like(param, 100.0)   # stale gradients a step must clear first
    net.eval()
    loss = ns["my_minibatch_step"](net, optimizer, feat, labels, input_nodes, output_nodes, blocks)
    return {"loss": float(loss) if isinstance(loss, (int, float)) else None, "type": type(loss).__name__,
            "training": net.training, "before": before, "after": _state(net), "seeds": seeds,
            "input_nodes": len(input_nodes)}


@call("lab04.train")
def _lab04_train(ns, graph: dict, model: str, batch_size: int, fanouts: list[int], seed: int, epochs: int,
                 patience: int) -> dict[str, Any]:
    """The package's minibatch trainer with the student's step, to convergence: its measurements, the logits of the
    best epoch's weights on every node (the checker scores the test nodes), and why memory is not exact here, if so."""
    g = graph_from_payload(graph)
    reason = exact_memory_unavailable_reason()
    if reason is None and not track_freed_memory():
        reason = "glibc refused mallopt(M_MMAP_THRESHOLD)"
    gc.collect()
    release_free_memory()
    kept: list[torch.nn.Module] = []
    run = train_minibatch(g, model, Optim(seed, epochs=epochs, patience=patience),
                          Batches(list(fanouts), int(batch_size)), step=ns["my_minibatch_step"],
                          on_restored=kept.append, progress=False)
    prepared = prepare_graph(g)
    kept[0].eval()
    with torch.no_grad():
        logits = kept[0](prepared, model_input(kept[0], prepared.ndata["feat"]))
    record = run.to_dict()
    record.pop("test_acc")     # computed on the hidden labels: meaningless
    return record | {"logits": logits.detach().float(), "not_exact": reason or ""}


@call("lab04.choice")
def _lab04_choice(ns) -> dict[str, Any]:
    """The student's ``choose_minibatch()``, as data (anything else as its text, for the checker's message)."""
    batch_size, fanouts = choice_as_data(ns["choose_minibatch"]())
    return {"batch_size": batch_size, "fanouts": fanouts}


# ---- lab 5b: a history table, a GAS forward through it, and training with both ---------------------------

LAB05B_PRELUDE = "import torch\nfrom gnnbook.ch5_minibatch.history import csr_rows, gcn_conv\n"


def batch_payload(batch: H.Batch) -> dict[str, Any]:
    """A GAS batch's nodes, halo and adjacency rows (sparse CSR, as its parts) as plain tensors."""
    return {"nodes": batch.nodes, "halo": batch.halo, "crow": batch.adj.crow_indices(), "col": batch.adj.col_indices(),
            "values": batch.adj.values(), "shape": list(batch.adj.shape)}


def _batch(payload: dict[str, Any]) -> SimpleNamespace:
    adj = torch.sparse_csr_tensor(payload["crow"], payload["col"], payload["values"], tuple(payload["shape"]))
    return SimpleNamespace(nodes=payload["nodes"], halo=payload["halo"], adj=adj,
                           all_nodes=torch.cat([payload["nodes"], payload["halo"]]))


def _tables(history: Any) -> list[torch.Tensor]:
    return [torch.as_tensor(t).detach().clone() for t in history.tables]


@call("lab05b.history")
def _lab05b_history(ns, num_nodes: int, width: int, num_tables: int, ops: list[list[Any]]) -> dict[str, Any]:
    """A new ``MyHistory``, then ``ops`` in order: ``["push", layer, nodes, values]`` pushes the values as a
    tensor that needs gradients and changes that tensor afterwards; ``["pull", layer, nodes]`` reads.  The
    tables at the start and the end, whether a table needs gradients, and what every pull returned."""
    history = ns["MyHistory"](num_nodes, width, num_tables)
    start, pulls = _tables(history), []
    for op in ops:
        if op[0] == "push":
            rows = op[3].clone().requires_grad_(True)
            pushed = rows * 1
            history.push(op[1], op[2], pushed)
            with torch.no_grad():
                pushed.add_(100.0)       # a history that kept the tensor instead of its values now differs
        else:
            pulls.append(torch.as_tensor(history.pull(op[1], op[2])).detach().clone())
    return {"start": start, "end": _tables(history), "pulls": pulls,
            "needs_grad": [bool(torch.as_tensor(t).requires_grad) for t in history.tables]}


@call("lab05b.forward")
def _lab05b_forward(ns, model: dict[str, Any], x: torch.Tensor, num_nodes: int, tables: list[torch.Tensor],
                    batches: list[dict[str, Any]], steps: list[list[Any]]) -> dict[str, Any]:
    """The student's forward on the check's model (``model``: what :func:`build_model` takes, and the weights),
    through a ``MyHistory`` whose tables start as ``tables``: one step per ``[training, batch index, seed]``
    (dropout on when training; the seed right before the step).  The logits and the tables after the steps."""
    net = build_model("gcn", model["in_feats"], model["classes"], num_layers=model["layers"])
    net.load_state_dict(model["state"])
    history = ns["MyHistory"](num_nodes, tables[0].shape[1], len(tables))
    for table, rows in zip(history.tables, tables):
        table.copy_(rows)
    parts, logits = [_batch(b) for b in batches], []
    for training, index, seed in steps:
        net.train(bool(training))
        torch.manual_seed(seed)
        logits.append(torch.as_tensor(ns["my_gas_forward"](net, parts[index], x, history)).detach().clone())
    return {"logits": logits, "tables": _tables(history)}


@call("lab05b.train")
def _lab05b_train(ns, graph: dict, epochs: int, num_parts: int, per_batch: int, seed: int) -> dict[str, Any]:
    """The package's GAS trainer with the student's forward and history, to convergence: the staleness it measured
    after every epoch, the best epoch, and the best weights' logits on every node (the checker scores the test
    nodes, whose labels are hidden here)."""
    g = graph_from_payload(graph)
    setup = H.build_setup(g, num_parts, per_batch, seed=seed)
    kept: list[torch.nn.Module] = []
    run = H.train(g, "gas", optim=Optim(seed, epochs=epochs, patience=epochs),
                  clusters=H.Clusters(num_parts, per_batch),
                  setup=setup, hooks=H.Hooks(ns["my_gas_forward"], ns["MyHistory"], on_restored=kept.append))
    kept[0].eval()
    with torch.no_grad():
        logits = H.full_forward(kept[0], setup.adj, model_input(kept[0], setup.graph.ndata["feat"]))
    record = run.to_dict()
    record.pop("test_acc")     # computed on the hidden labels: meaningless
    return record | {"logits": logits.detach().float()}
