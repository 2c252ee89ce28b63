"""Lab 2's checks (book 2.2, 2.3.2, ``labs/lab02_message_passing.ipynb``): a GCN layer and a two-layer GCN.

Book: 2.2 GNN representation; 2.3.2 graph convolutional networks (lab 2).

Used in: labs/lab02_message_passing.ipynb.

Each check builds its own inputs (Cora, loaded again, and small directed graphs whose in- and
out-degrees differ), computes the expected values with DGL's ``GraphConv`` in this process, and asks
the student (:mod:`gnnbook.course.grading.student`) only for what the student's classes return on
those inputs: :func:`check_layer` the layer's output with given weights, :func:`check_gradients` its
gradients, :func:`check_gcn` the model's output with its own weights and, trained with the lab's loop
on the training and validation labels, its logits (the test labels stay here).  In the autograder
the student is another, sandboxed process; in the lab's check cells, the notebook itself.

Example:
    >>> g = directed_graph(30, 120, 4, seed=0)
    >>> bool((g.in_degrees() != g.out_degrees()).any())
    True
    >>> check_layer(Here(globals()))["max_abs_diff"] < 1e-5    # doctest: +SKIP
    True
"""
from __future__ import annotations

from typing import Any

import dgl
import dgl.nn as dglnn
import torch

from ...data import load_dataset
from ...training.train import prepare_graph
from ..vetting import Policy
from .engine import Check
from .student import LAB02_PRELUDE, Here, graph_payload

__all__ = ["CHECKS", "POLICY", "PRELUDE", "Here", "check_gcn", "check_gradients", "check_layer", "cora_graph",
           "directed_graph"]

PRELUDE = LAB02_PRELUDE
# A layer is tensors and message passing: DGL's and PyG's layers and normalisers are refused by name.
POLICY = Policy(modules=("torch", "dgl", "math", "numpy"),
                references=("GraphConv", "EdgeWeightNorm", "GCNConv", "gcn_norm", "SGConv", "TAGConv", "APPNPConv",
                            "GCN2Conv", "DenseGraphConv", "LGConv", "get_laplacian"))
ATOL = 1e-5


def cora_graph() -> dgl.DGLGraph:
    """Cora with exactly one self-loop per node (the graph is ``A + I``), loaded afresh."""
    return prepare_graph(load_dataset("cora"))


def directed_graph(num_nodes: int, num_edges: int, in_feats: int, seed: int) -> dgl.DGLGraph:
    """A random directed graph with one self-loop per node (so no degree is zero) and random
    features ``ndata["feat"]``: a node's in- and out-degree differ, unlike on Cora."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_nodes, (num_edges,), generator=gen)
    dst = torch.randint(0, num_nodes // 2, (num_edges,), generator=gen)   # half the nodes receive most
    g = prepare_graph(dgl.graph((src, dst), num_nodes=num_nodes))
    g.ndata["feat"] = torch.randn(num_nodes, in_feats, generator=gen)
    return g


def _reference(in_feats: int, out_feats: int, seed: int) -> dglnn.GraphConv:
    torch.manual_seed(seed)
    conv = dglnn.GraphConv(in_feats, out_feats, norm="both", bias=True)
    torch.nn.init.uniform_(conv.bias, -0.1, 0.1)        # a non-zero bias, so that it is checked too
    return conv


def _layer_cases(thorough: bool) -> dict[str, tuple[dgl.DGLGraph, int]]:
    cases = {"Cora, 1433 -> 16": (cora_graph(), 16),
             "a directed graph, 8 -> 4": (directed_graph(40, 200, 8, seed=1), 4)}
    if thorough:
        cases["a directed graph, 5 -> 7"] = (directed_graph(60, 500, 5, seed=7), 7)
        cases["a directed graph, 3 -> 2"] = (directed_graph(9, 30, 3, seed=11), 2)
    return cases


def _shape_error(case: str, got: Any, expected: torch.Tensor) -> str | None:
    if not isinstance(got, torch.Tensor):
        return f"{case}: forward returned {type(got).__name__}, not a tensor"
    if got.shape != expected.shape:
        return f"{case}: output shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    return None


def check_layer(student, thorough: bool = False) -> dict[str, Any]:
    """Task 1: ``MyGraphConv`` with DGL's weights and bias equals ``GraphConv(norm="both")`` on Cora and
    on directed graphs (``thorough``: two more)."""
    cases, calls, expected = _layer_cases(thorough), [], []
    for case, (g, width) in cases.items():
        feat = g.ndata["feat"]
        conv = _reference(feat.shape[1], width, seed=0)
        with torch.no_grad():
            expected.append(conv(g, feat))
        calls.append(("lab02.layer_forward", {"graph": graph_payload(g, feat=feat), "out_feats": width,
                                              "weight": conv.weight.detach().clone(),
                                              "bias": conv.bias.detach().clone()}))
    worst = 0.0
    for case, got, want in zip(cases, student.run(calls), expected):
        error = _shape_error(case, got, want)
        assert error is None, error
        diff = float((got - want).abs().max())
        assert torch.allclose(got, want, atol=ATOL), (
            f"{case}: max |difference| = {diff:.2e}: check the normalisation (1/sqrt(d_u d_v), d_u the "
            "sender's out-degree, d_v the receiver's in-degree) and the bias")
        worst = max(worst, diff)
    return {"max_abs_diff": worst, "graphs": len(cases)}


def check_gradients(student, thorough: bool = False) -> dict[str, Any]:
    """Task 1: the gradients of a random projection of the layer's output, with respect to its weight and
    bias, equal ``GraphConv``'s (so training can work)."""
    cases = {"Cora": (cora_graph(), 16), "a directed graph": (directed_graph(40, 200, 8, seed=2), 16)}
    if thorough:
        cases["a directed graph, 6 -> 3"] = (directed_graph(30, 150, 6, seed=13), 3)
    calls, expected = [], []
    for seed, (case, (g, width)) in enumerate(cases.items()):
        feat = g.ndata["feat"]
        conv = _reference(feat.shape[1], width, seed=seed)
        probe = torch.randn(g.num_nodes(), width, generator=torch.Generator().manual_seed(seed))
        (conv(g, feat) * probe).sum().backward()
        expected.append((conv.weight.grad, conv.bias.grad))
        calls.append(("lab02.layer_gradients", {"graph": graph_payload(g, feat=feat), "out_feats": width,
                                                "probe": probe, "weight": conv.weight.detach().clone(),
                                                "bias": conv.bias.detach().clone()}))
    for case, got, (weight, bias) in zip(cases, student.run(calls), expected):
        assert got["weight"] is not None and float(got["weight"].abs().sum()) > 0, f"{case}: no gradient reaches weight"
        assert got["weight"].shape == weight.shape and torch.allclose(got["weight"], weight, atol=1e-4), \
            f"{case}: the weight's gradient differs from GraphConv's (is the output computed from self.weight?)"
        assert (got["bias"] is not None and got["bias"].shape == bias.shape
                and torch.allclose(got["bias"], bias, atol=1e-4)), \
            f"{case}: the bias's gradient differs from GraphConv's: the bias should be added once per node"
    return {"graphs": len(cases)}


def check_gcn(student, thorough: bool = False, seed: int = 0, epochs: int = 200, hidden: int = 16) -> dict[str, Any]:
    """Task 2: with dropout off, ``MyGCN`` is ``GraphConv -> ReLU -> GraphConv`` on its two layers' weights;
    trained with the lab's loop (seed 0, 200 epochs), it reaches the paper's 81.5% on Cora within 3.5 points."""
    small = directed_graph(50, 300, 12, seed=5)
    biases = [torch.empty(6).uniform_(-0.5, 0.5, generator=torch.Generator().manual_seed(1)),
              torch.empty(3).uniform_(-0.5, 0.5, generator=torch.Generator().manual_seed(2))]
    cora = cora_graph()
    labels, train, val = cora.ndata["label"], cora.ndata["train_mask"], cora.ndata["val_mask"]
    seen = torch.where(train | val, labels, torch.zeros_like(labels))      # the test labels stay here
    architecture, run = student.run([
        ("lab02.gcn_eval", {"graph": graph_payload(small, feat=small.ndata["feat"]), "hidden": 6, "classes": 3,
                            "biases": biases, "seed": 0}),
        ("lab02.train_gcn", {"graph": graph_payload(cora, feat=cora.ndata["feat"], label=seen, train_mask=train,
                                                    val_mask=val),
                             "classes": int(labels.max()) + 1, "seed": seed, "epochs": epochs, "hidden": hidden})])
    assert architecture["layers"] == 2, f"use two MyGraphConv layers, not {architecture['layers']}"
    h = small.ndata["feat"]
    with torch.no_grad():
        for i, (weight, bias) in enumerate(zip(architecture["weights"], architecture["biases"])):
            conv = dglnn.GraphConv(weight.shape[0], weight.shape[1], norm="both", bias=True)
            conv.weight.copy_(weight)
            conv.bias.copy_(bias)
            h = conv(small, h)
            h = torch.relu(h) if i == 0 else h
    error = _shape_error("the model on a directed graph", architecture["out"], h)
    assert error is None, error
    assert torch.allclose(architecture["out"], h, atol=ATOL), \
        "with dropout off, your model is not GraphConv -> ReLU -> GraphConv on its layers' weights"
    assert run["layers"] == 2, "use two MyGraphConv layers"
    test = cora.ndata["test_mask"]
    logits = run["logits"]
    assert logits.shape == (cora.num_nodes(), int(labels.max()) + 1), (
        f"the trained model returned {tuple(logits.shape)}")
    test_acc = float((logits[test].argmax(1) == labels[test]).float().mean())
    assert 0.78 <= test_acc <= 0.85, \
        f"test accuracy {test_acc:.3f} outside 0.78-0.85: check dropout, ReLU and the layer sizes"
    return {"test_acc": test_acc, "best_val": run["best_val"], "curve": run["curve"].tolist(), "seed": seed,
            "epochs": epochs}


CHECKS = (Check(1, "MyGraphConv equals DGL's GraphConv with the same weights", check_layer),
          Check(1, "gradients reach the layer's weight and bias, as GraphConv's", check_gradients),
          Check(2, "the two-layer GCN is GraphConv -> ReLU -> GraphConv and reaches 81.5% +- 3.5 on Cora", check_gcn))
