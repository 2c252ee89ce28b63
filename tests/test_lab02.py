"""Lab 2's checks, piece by piece (tests/test_grading.py grades the whole lab: the solution, the release
and the cheats of tests/cheats/lab02_message_passing.py).  Here: the notebook's check cells are
the grader's checks, and each input the checks choose catches the mistake it is there for."""
import inspect
from pathlib import Path

import dgl.function as fn
import dgl.nn as dglnn
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from gnnbook.course.grading.engine import teacher_grade_ids
from gnnbook.course.grading.lab02_message_passing import (CHECKS, POLICY, Here, check_gcn, check_gradients, check_layer,
                                                          cora_graph)
from gnnbook.course.grading.student import CALLS, graph_payload
from gnnbook.course.vetting import vet

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


class BiasTwice(Layer):
    def forward(self, g, h):
        return super().forward(g, h) + self.bias


def test_one_check_cell_per_check_and_the_notebook_runs_the_graders_checks():
    solution_ids, checks_per_task = teacher_grade_ids(LAB)
    assert solution_ids == ["task1-solution1", "task2-solution1"]
    assert checks_per_task == {1: 2, 2: 1} and len(CHECKS) == 3
    source = LAB.read_text()
    for check in CHECKS:
        assert f"{check.run.__name__}(Here(globals()))" in source, f"no check cell runs {check.run.__name__}"


def test_directed_graphs_catch_a_layer_that_mixes_up_the_degrees():
    assert check_layer(Here({"MyGraphConv": Layer}), thorough=True)["max_abs_diff"] < 1e-5
    with pytest.raises(AssertionError, match="a directed graph, 8 -> 4: max"):
        check_layer(Here({"MyGraphConv": MixedUpLayer}))      # Cora alone cannot tell (undirected): it passes first


def test_the_gradients_catch_a_bias_added_twice():
    check_gradients(Here({"MyGraphConv": Layer}), thorough=True)
    with pytest.raises(AssertionError, match="once per node"):
        check_gradients(Here({"MyGraphConv": BiasTwice}))


def test_a_missing_relu_is_caught_before_training():
    with pytest.raises(AssertionError, match="GraphConv -> ReLU -> GraphConv"):
        check_gcn(Here({"MyGraphConv": Layer, "MyGCN": LinearGCN}))


def test_a_reference_inside_the_layer_is_refused_before_it_runs():
    refusals = vet(inspect.getsource(CallsGraphConv), POLICY)
    assert refusals and "GraphConv" in str(refusals[0]), refusals
    assert vet(inspect.getsource(Layer), POLICY) == []


class TwoLayerGCN(nn.Module):
    """The lab's model, built on the layer above: what ``train_gcn`` trains."""

    def __init__(self, in_feats, hidden, classes):
        super().__init__()
        self.first, self.second = Layer(in_feats, hidden), Layer(hidden, classes)

    def forward(self, g, x):
        return self.second(g, F.relu(self.first(g, F.dropout(x, 0.5, self.training))))


def test_the_grading_loop_returns_the_best_epochs_weights_not_the_last():
    """The lab's loop keeps the best validation epoch's weights: the logits it returns score the best
    validation accuracy, where the last epoch scored less."""
    graph = cora_graph()
    nd = graph.ndata
    out = CALLS["lab02.train_gcn"]({"MyGraphConv": Layer, "MyGCN": TwoLayerGCN},
                                   graph_payload(graph, feat=nd["feat"], label=nd["label"], train_mask=nd["train_mask"],
                                                 val_mask=nd["val_mask"]), classes=7, seed=0, epochs=9, hidden=16)
    assert float(out["curve"][-1][1]) < out["best_val"], "the last epoch was worse, so restoring must matter"
    val = nd["val_mask"]
    assert float((out["logits"][val].argmax(1) == nd["label"][val]).float().mean()) == pytest.approx(out["best_val"])
