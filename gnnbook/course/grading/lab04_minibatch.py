"""Lab 4's grading code (book 4.1, ``labs/lab04_minibatch.ipynb``): a minibatch training step, and a batch
size and fanouts within a memory budget, checked.

Book: 4.1.1 full-graph training; 4.1.2 minibatch training (lab 4).

Used in: labs/lab04_minibatch.ipynb.

The lab's locked checks call these functions with the student's step (and choice) and inputs of their
own; none of them reads a value that an editable cell left behind.  Every call into the student's
code runs with ``LAB_REFERENCES["lab04_minibatch"]`` (the package's minibatch step) refused.
:func:`check_step` runs one step on full-neighbour blocks of a graph it builds, where the seeds'
loss on the blocks must equal their loss on the whole graph and one plain SGD step must move every
weight by exactly ``-lr`` x that loss's gradient.  :func:`train_with_step` trains GraphSAGE on Cora
with the student's step to convergence (fixed seed, the lab's epoch budgets) and measures the peak
memory of its training steps; :func:`full_graph_reference` does the same full-graph, once per
grading: the first check that needs it runs it, a later check reuses the numbers.

Example:
    >>> g = random_graph(40, 160, 6, 3, seed=0)
    >>> g.num_nodes(), g.ndata["feat"].shape[1], int(g.ndata["label"].max()) < 3
    (40, 6, True)
    >>> check_step(my_minibatch_step, cora_graph(), 64, [-1, -1])["loss_equal"]   # doctest: +SKIP
    True
"""
from __future__ import annotations

import copy
import gc
from typing import Any, Callable, Sequence

import dgl
import torch
import torch.nn.functional as F

from ...base.memory import release_free_memory, track_freed_memory
from ...base.seeding import set_seed
from ...data import load_dataset
from ...models import build_model
from ...training.minibatch import Batches, neighbor_loader, train_minibatch
from ...training.train import Optim, TrainResult, prepare_graph, train_node_classifier
from ..labcheck import LAB_REFERENCES, reference_forbidden

__all__ = ["ACCURACY_SLACK", "BUDGET_FRACTION", "GRADING", "HINT", "STEP_SETTING", "check_step", "cora_graph",
           "full_graph_reference", "random_graph", "student_step", "train_with_step"]

# The teacher's floors: the check asks at most this share of full-graph training's peak (a smaller
# budget_fraction in the parameters tightens it) and at most this accuracy below full-graph training.
BUDGET_FRACTION = 0.2
ACCURACY_SLACK = 0.02
# What the checks train with, whatever the parameters cell says: one seed, the lab's epoch budgets.
GRADING: dict[str, Any] = dict(dataset="cora", model="sage", seed=0, full_epochs=400, full_patience=50,
                               mb_epochs=300, mb_patience=30)
# Task 1's training: the batch size and fanouts the step is trained with to convergence.
STEP_SETTING: dict[str, Any] = dict(batch_size=64, fanouts=(10, 10))
HINT = ("write the step yourself: gather feat[input_nodes], run model(blocks, x), cross-entropy against "
        "labels[output_nodes], zero the gradients, backward, optimizer.step()")

# Full-graph numbers per (dataset, model, seed, epochs, patience): filled by the first check that needs
# them (task 1's training check), read back by the next (task 2's budget check); the lab's editable cells
# read the numbers the check printed and left in its own variables, not this.
_FULL_GRAPH: dict[tuple, dict[str, float]] = {}


def _student():
    return reference_forbidden(LAB_REFERENCES["lab04_minibatch"], hint=HINT)


def student_step(step: Callable[..., float]) -> Callable[..., float]:
    """``step`` with the package's minibatch step refused during every call (what the checks train with)."""
    def refused_references(*args: Any) -> float:
        with _student():
            return step(*args)
    return refused_references


def cora_graph() -> dgl.DGLGraph:
    """Cora with exactly one self-loop per node, loaded afresh."""
    return prepare_graph(load_dataset("cora"))


def random_graph(num_nodes: int, num_edges: int, in_feats: int, num_classes: int, seed: int) -> dgl.DGLGraph:
    """A random directed graph with one self-loop per node, random features and labels and a training
    mask over half the nodes (other sizes, widths and classes than Cora)."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_nodes, (num_edges,), generator=gen)
    dst = torch.randint(0, num_nodes, (num_edges,), generator=gen)
    g = prepare_graph(dgl.graph((src, dst), num_nodes=num_nodes))
    g.ndata["feat"] = torch.randn(num_nodes, in_feats, generator=gen)
    g.ndata["label"] = torch.randint(0, num_classes, (num_nodes,), generator=gen)
    g.ndata["train_mask"] = torch.rand(num_nodes, generator=gen) < 0.5
    return g


def check_step(step: Callable[..., float], graph: dgl.DGLGraph, batch_size: int, fanouts: Sequence[int],
               model: str = "sage", seed: int = 0, lr: float = 0.5, **model_options: Any) -> dict[str, Any]:
    """One call of the student's ``step`` on the first minibatch of ``graph``'s training nodes with
    ``fanouts`` (``-1``: every neighbour), a dropout-free ``model``, plain SGD (``lr``) and stale
    gradients of 100 in every ``.grad``, the model in eval mode before the call.  Returns the returned
    loss and its type, the seeds' loss of the same model on the whole graph (``expected``; equal on
    full-neighbour blocks), whether the model was put in training mode, and the parameters that did not
    move by exactly ``-lr`` x the gradient of that loss."""
    feat, labels = graph.ndata["feat"], graph.ndata["label"]
    train_nodes = graph.ndata["train_mask"].nonzero().squeeze(1)
    set_seed(seed)
    input_nodes, output_nodes, blocks = next(iter(neighbor_loader(graph, train_nodes, list(fanouts), batch_size)))
    net = build_model(model, feat.shape[1], int(labels.max()) + 1, dropout=0.0, num_layers=len(fanouts),
                      **model_options)
    before = copy.deepcopy(net)
    expected = F.cross_entropy(before(graph, feat)[output_nodes], labels[output_nodes])
    grads = torch.autograd.grad(expected, list(before.parameters()))
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    for param in net.parameters():
        param.grad = torch.full_like(param, 100.0)   # stale gradients a step must clear first
    net.eval()
    with _student():
        loss = step(net, optimizer, feat, labels, input_nodes, output_nodes, blocks)
    moved_wrongly = [name for (name, after), start, grad in zip(net.named_parameters(), before.parameters(), grads)
                     if not torch.allclose(after, start - lr * grad, atol=1e-5)]
    return {"loss": loss, "is_float": isinstance(loss, float), "expected": float(expected),
            "loss_equal": isinstance(loss, float) and abs(loss - float(expected)) < 1e-4,
            "training": net.training, "moved_wrongly": moved_wrongly, "seeds": len(output_nodes),
            "input_nodes": len(input_nodes)}


def _settle() -> None:
    """Resident memory follows live tensors from here on, and starts from the live set."""
    track_freed_memory()
    gc.collect()
    release_free_memory()


def full_graph_reference(seed: int | None = None) -> dict[str, float]:
    """Full-graph training of the lab's model on its dataset with :data:`GRADING`'s epoch budget:
    ``test_acc`` and ``peak_bytes`` of the training (one run per seed and grading)."""
    seed = GRADING["seed"] if seed is None else seed
    key = (GRADING["dataset"], GRADING["model"], seed, GRADING["full_epochs"], GRADING["full_patience"])
    if key not in _FULL_GRAPH:
        _settle()
        run = train_node_classifier(load_dataset(GRADING["dataset"]), GRADING["model"],
                                    Optim(seed, epochs=GRADING["full_epochs"], patience=GRADING["full_patience"]),
                                    progress=False)
        _FULL_GRAPH[key] = {"test_acc": run.test_acc, "peak_bytes": float(run.peak_memory_bytes),
                            "seconds_per_epoch": run.seconds_per_epoch}
    return dict(_FULL_GRAPH[key])


def train_with_step(step: Callable[..., float], batch_size: int, fanouts: Sequence[int], seed: int | None = None,
                    progress: bool = False) -> TrainResult:
    """Minibatch training of the lab's model on its dataset with the student's ``step`` (the package's
    step refused meanwhile), ``batch_size`` and ``fanouts``, to convergence with :data:`GRADING`'s
    epoch budget and patience; its ``peak_memory_bytes`` is the peak of the training steps."""
    seed = GRADING["seed"] if seed is None else seed
    _settle()
    return train_minibatch(load_dataset(GRADING["dataset"]), GRADING["model"],
                           Optim(seed, epochs=GRADING["mb_epochs"], patience=GRADING["mb_patience"]),
                           Batches(list(fanouts), int(batch_size)), step=student_step(step), progress=progress)
