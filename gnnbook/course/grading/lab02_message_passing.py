"""Lab 2's grading code (book 2.2, 2.3.2, ``labs/lab02_message_passing.ipynb``): a GCN layer and a two-layer GCN, checked.

Book: 2.2 GNN representation; 2.3.2 graph convolutional networks (lab 2).

Used in: labs/lab02_message_passing.ipynb.

The lab's locked checks call these functions with the student's classes and inputs of their own
choosing (Cora, loaded again, and small directed graphs whose in- and out-degrees differ); none of
them reads a value that an editable cell left behind.  Every call into the student's code runs
with the implementations of ``LAB_REFERENCES["lab02_message_passing"]`` refused (DGL's
``GraphConv`` and ``EdgeWeightNorm``, PyG's ``GCNConv`` and ``gcn_norm``, the package's models and
layers and the package's ready-made normalised adjacencies): :func:`compare_with_graphconv`
compares the layer with DGL's ``GraphConv`` (run outside the refusal) on the same weights,
:func:`layer_gradients` backpropagates through it, and :func:`train_gcn` trains the student's
two-layer model with the lab's loop (Adam, best-validation epoch) and one fixed seed.

Example:
    >>> g = directed_graph(30, 120, 4, seed=0)
    >>> bool((g.in_degrees() != g.out_degrees()).any())
    True
    >>> compare_with_graphconv(MyLayer, g, 3)["max_abs_diff"] < 1e-5   # doctest: +SKIP
    True
"""
from __future__ import annotations

from typing import Any

import dgl
import dgl.nn as dglnn
import torch
import torch.nn.functional as F

from ...base.seeding import set_seed
from ...data import load_dataset
from ...training.train import BestEpoch, accuracy, prepare_graph
from ..labcheck import LAB_REFERENCES, reference_forbidden

__all__ = ["HINT", "compare_gcn_architecture", "compare_with_graphconv", "cora_graph", "directed_graph", "gcn_layers",
           "layer_gradients", "train_gcn"]

HINT = ("implement the layer yourself with message passing (g.update_all) or a sparse-matrix product "
        "built from g.edges() and the degrees")


def _student():
    """The refusal every call into the student's code runs under."""
    return reference_forbidden(LAB_REFERENCES["lab02_message_passing"], hint=HINT)


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


def compare_with_graphconv(layer_cls: type, graph: dgl.DGLGraph, out_feats: int, seed: int = 0,
                           bias_scale: float = 0.1) -> dict[str, Any]:
    """Build DGL's ``GraphConv(norm="both")`` with a random non-zero bias and the student's
    ``layer_cls(in, out)``, give the student's layer the same ``weight`` and ``bias``, and run both on
    ``graph.ndata["feat"]``.  Returns the output shapes and the largest difference, or ``error``."""
    feat = graph.ndata["feat"]
    torch.manual_seed(seed)
    reference = dglnn.GraphConv(feat.shape[1], out_feats, norm="both", bias=True)
    torch.nn.init.uniform_(reference.bias, -bias_scale, bias_scale)
    with torch.no_grad():
        expected = reference(graph, feat)
        with _student():
            mine = layer_cls(feat.shape[1], out_feats)
            mine.weight.copy_(reference.weight)
            mine.bias.copy_(reference.bias)
            got = mine(graph, feat)
    return _compared(got, expected)


def _compared(got: Any, expected: torch.Tensor) -> dict[str, Any]:
    result = {"expected_shape": tuple(expected.shape), "shape": tuple(getattr(got, "shape", ())), "error": None,
              "max_abs_diff": float("inf"), "close": False}
    if not isinstance(got, torch.Tensor):
        result["error"] = f"forward returned {type(got).__name__}, not a tensor"
    elif got.shape == expected.shape:
        result["max_abs_diff"] = float((got.float() - expected).abs().max())
        result["close"] = bool(torch.allclose(got.float(), expected, atol=1e-5))
    return result


def layer_gradients(layer_cls: type, graph: dgl.DGLGraph, out_feats: int, seed: int = 0) -> dict[str, Any]:
    """Backward of ``layer(graph, feat).sum()`` through the student's layer: the weight gradient's
    absolute sum and the bias gradient (one per node, so ``num_nodes`` in every entry)."""
    torch.manual_seed(seed)
    feat = graph.ndata["feat"]
    with _student():
        mine = layer_cls(feat.shape[1], out_feats)
        mine(graph, feat).sum().backward()
    weight, bias = mine.weight.grad, mine.bias.grad
    return {"weight_grad_abs_sum": 0.0 if weight is None else float(weight.abs().sum()),
            "bias_once_per_node": bias is not None and bool(torch.allclose(
                bias, torch.full((out_feats,), float(graph.num_nodes())))),
            "bias_grad": None if bias is None else bias.detach().clone()}


def gcn_layers(model: torch.nn.Module, layer_cls: type, in_feats: int) -> list:
    """The model's ``layer_cls`` layers, the one that reads the ``in_feats`` input features first."""
    layers = [m for m in model.modules() if isinstance(m, layer_cls)]
    return sorted(layers, key=lambda m: m.weight.shape[0] != in_feats)


def compare_gcn_architecture(model_cls: type, layer_cls: type, graph: dgl.DGLGraph, hidden: int, classes: int,
                             seed: int = 0) -> dict[str, Any]:
    """The student's ``model_cls(in, hidden, classes)`` in eval mode (dropout off) against
    ``GraphConv -> ReLU -> GraphConv`` (DGL's, outside the refusal) with the weights of the model's
    two ``layer_cls`` layers; ``layers`` is how many it has."""
    feat = graph.ndata["feat"]
    torch.manual_seed(seed)
    with torch.no_grad(), _student():
        model = model_cls(feat.shape[1], hidden, classes)
        layers = gcn_layers(model, layer_cls, feat.shape[1])
        for layer in layers:                       # a non-zero bias, so that it is checked too
            torch.nn.init.uniform_(layer.bias, -0.5, 0.5)
        model.eval()
        got = model(graph, feat)
    result = {"layers": len(layers)}
    if len(layers) != 2:
        return result | {"error": f"{len(layers)} {layer_cls.__name__} layers", "close": False}
    h = feat
    with torch.no_grad():
        for i, layer in enumerate(layers):
            conv = dglnn.GraphConv(layer.weight.shape[0], layer.weight.shape[1], norm="both", bias=True)
            conv.weight.copy_(layer.weight)
            conv.bias.copy_(layer.bias)
            h = conv(graph, h)
            h = torch.relu(h) if i == 0 else h
    return result | _compared(got, h)


def train_gcn(model_cls: type, graph: dgl.DGLGraph, seed: int = 0, epochs: int = 200, hidden: int = 16) -> dict[str, Any]:
    """The lab's training loop on the student's ``model_cls(in, hidden, classes)``: Adam (lr 0.01,
    weight decay 5e-4) on the training nodes for ``epochs`` epochs, keeping the weights of the epoch
    with the best validation accuracy; returns the model (those weights, eval mode), its test and
    best validation accuracy and the curve ``[(loss, val_acc), ...]``."""
    feat, labels = graph.ndata["feat"], graph.ndata["label"]
    masks = {split: graph.ndata[f"{split}_mask"] for split in ("train", "val", "test")}
    set_seed(seed)
    best, curve = BestEpoch(patience=epochs), []  # selection only: every epoch runs
    with _student():
        model = model_cls(feat.shape[1], hidden, int(labels.max()) + 1)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
        for epoch in range(epochs):
            model.train()
            loss = F.cross_entropy(model(graph, feat)[masks["train"]], labels[masks["train"]])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            model.eval()
            with torch.no_grad():
                logits = model(graph, feat)
            val_acc = accuracy(logits[masks["val"]], labels[masks["val"]])
            curve.append((float(loss), val_acc))
            best.update(model, epoch, val_acc)
        best.restore(model)
        with torch.no_grad():
            test_acc = accuracy(model(graph, feat)[masks["test"]], labels[masks["test"]])
    return {"model": model, "test_acc": test_acc, "best_val": best.val_acc, "curve": curve, "seed": seed,
            "epochs": epochs}
