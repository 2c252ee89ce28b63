"""Lab 2's checks, piece by piece (tests/test_grading.py grades the whole lab: the solution, the release,
typed answers and the reference cheats of tests/cheats/lab02_message_passing.py).  Here: the release
hides the hidden tests, and each input the checks choose catches the mistake it is there for."""
from pathlib import Path

import dgl.function as fn
import dgl.nn as dglnn
import nbformat
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from gnnbook.course.grading.lab02_message_passing import (compare_gcn_architecture, compare_with_graphconv,
                                                          cora_graph, directed_graph, layer_gradients)
from gnnbook.course.labcheck import ReferenceCallError
from gnnbook.course.release import release
LAB = Path(__file__).resolve().parents[1] / "labs" / "lab02_message_passing.ipynb"


class Layer(nn.Module):
    """A GCN layer; ``receiver_degree_for_both`` is the usual mistake (PyG's gcn_norm makes it too)."""
    receiver_degree_for_both = False

    def __init__(self, in_feats, out_feats):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(in_feats, out_feats))
        self.bias = nn.Parameter(torch.zeros(out_feats))
        nn.init.xavier_uniform_(self.weight)

    def forward(self, g, h):
        with g.local_scope():
            sender = g.in_degrees() if self.receiver_degree_for_both else g.out_degrees()
            g.ndata["h"] = (h @ self.weight) * sender.float().rsqrt()[:, None]
            g.update_all(fn.copy_u("h", "m"), fn.sum("m", "h"))
            return g.ndata["h"] * g.in_degrees().float().rsqrt()[:, None] + self.bias


class MixedUpLayer(Layer):
    receiver_degree_for_both = True


class CallsGraphConv(Layer):
    def forward(self, g, h):
        conv = dglnn.GraphConv(*self.weight.shape, norm="both", weight=False, bias=False)
        return conv(g, h @ self.weight) + self.bias


class GCN(nn.Module):
    relu = staticmethod(F.relu)

    def __init__(self, in_feats, hidden, classes):
        super().__init__()
        self.conv1, self.conv2, self.dropout = Layer(in_feats, hidden), Layer(hidden, classes), nn.Dropout(0.5)

    def forward(self, g, h):
        return self.conv2(g, self.dropout(self.relu(self.conv1(g, self.dropout(h)))))


class LinearGCN(GCN):
    relu = staticmethod(lambda h: h)


def test_the_release_hides_the_hidden_tests(tmp_path):
    (student,) = release([LAB], tmp_path)
    checks = {"teacher": [c.source for c in nbformat.read(LAB, as_version=4).cells if c.source.startswith("# Check")],
              "student": [c.source for c in nbformat.read(student, as_version=4).cells if c.source.startswith("# Check")]}
    assert len(checks["teacher"]) == len(checks["student"]) == 3
    assert sum("### BEGIN HIDDEN TESTS" in c for c in checks["teacher"]) == 2
    student_code = "\n".join(checks["student"])
    for hidden in ("HIDDEN TESTS", "seed=7", "seed=11", "compare_gcn_architecture(MyGCN"):
        assert hidden not in student_code


def test_directed_graphs_catch_a_layer_that_mixes_up_the_degrees():
    assert compare_with_graphconv(Layer, directed_graph(40, 200, 8, seed=1), 4)["close"]
    assert compare_with_graphconv(MixedUpLayer, cora_graph(), 16)["close"], "Cora alone cannot tell (undirected)"
    assert not compare_with_graphconv(MixedUpLayer, directed_graph(40, 200, 8, seed=1), 4)["close"]


def test_the_layer_gradients_and_the_architecture_are_measured():
    r = layer_gradients(Layer, directed_graph(40, 200, 8, seed=2), 16)
    assert r["weight_grad_abs_sum"] > 0 and r["bias_once_per_node"]
    graph = directed_graph(50, 300, 12, seed=5)
    assert compare_gcn_architecture(GCN, Layer, graph, 6, 3)["close"]
    assert not compare_gcn_architecture(LinearGCN, Layer, graph, 6, 3)["close"], "a missing ReLU is caught"


def test_a_reference_inside_the_layer_is_refused():
    with pytest.raises(ReferenceCallError, match="reference implementation"):
        compare_with_graphconv(CallsGraphConv, directed_graph(40, 200, 8, seed=1), 4)


class TwoLayerGCN(nn.Module):
    """The lab's model, built on the layer above: what ``train_gcn`` trains."""

    def __init__(self, in_feats, hidden, classes):
        super().__init__()
        self.first, self.second = Layer(in_feats, hidden), Layer(hidden, classes)

    def forward(self, g, x):
        return self.second(g, F.relu(self.first(g, F.dropout(x, 0.5, self.training))))


def test_the_grading_loop_returns_the_best_epochs_weights_not_the_last():
    """train_gcn keeps the best validation epoch's weights (BestEpoch.restore): the model it returns scores the
    best validation accuracy, where the last epoch scored less."""
    from gnnbook.course.grading.lab02_message_passing import train_gcn
    from gnnbook.training.train import accuracy

    graph = cora_graph()
    out = train_gcn(TwoLayerGCN, graph, seed=0, epochs=9)  # validation: ... 0.518 at epoch 7, 0.512 at 8
    assert out["curve"][-1][1] < out["best_val"], "the last epoch was worse, so restoring must matter"
    model, val = out["model"], graph.ndata["val_mask"]
    assert not model.training
    with torch.no_grad():
        assert accuracy(model(graph, graph.ndata["feat"])[val], graph.ndata["label"][val]) == out["best_val"]
