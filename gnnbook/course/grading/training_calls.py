"""The student's side of lab 4: one step on the check's minibatch, and training runs with the student's step.

Book: none (autograding; lab 4 is book 4.1.2).

Used in: no notebook directly (lab 4 reaches it through its grading module).

The calls take a graph whose test labels the checker has already hidden (every test node labelled 0), so
neither the student's step (its ``labels``, the blocks' ``srcdata``) nor anything else in the student's
process sees them: the checker scores the returned logits.  The package's minibatch trainer runs here
with the student's step in place of its own; what it measures (peak memory of the training steps, time per
epoch, the best epoch) comes back as numbers.

Example:
    >>> "lab04.step" in CALLS and "lab04.train" in CALLS
    True
"""
from __future__ import annotations

import gc
from typing import Any

import torch

from ...base.memory import exact_memory_unavailable_reason, release_free_memory, track_freed_memory
from ...base.seeding import set_seed
from ...models import build_model
from ...training.minibatch import Batches, neighbor_loader, train_minibatch
from ...training.train import Optim, model_input, prepare_graph
from .student import CALLS, call, graph_from_payload

__all__ = ["CALLS", "LAB04_PRELUDE"]

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
    chosen = ns["choose_minibatch"]()
    batch_size, fanouts = chosen if isinstance(chosen, (tuple, list)) and len(chosen) == 2 else (chosen, None)
    as_data = (lambda v: v if isinstance(v, int) and not isinstance(v, bool) else repr(v))
    return {"batch_size": as_data(batch_size),
            "fanouts": [as_data(f) for f in fanouts] if isinstance(fanouts, (list, tuple)) else repr(fanouts)}
