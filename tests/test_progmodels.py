"""The three programming models (tensor-, graph-, vertex-centric) compute the same layers,
and PageRank runs on the same engines (gnnbook.ch7_systems.progmodels, chapter 7)."""
import dgl
import pytest
import torch

from gnnbook.ch7_systems import progmodels as pm
from gnnbook.data import load_dataset


@pytest.fixture(scope="module")
def graph_and_features():
    g = load_dataset("powerlaw", num_nodes=300, num_features=12, seed=1)
    return pm.prepare_graph(g), g.ndata["feat"]


@pytest.mark.parametrize("kind, heads", [("gcn", 1), ("gat", 1), ("gat", 3)])
def test_three_models_give_the_same_layer(graph_and_features, kind, heads):
    g, x = graph_and_features
    w = pm.init_weights(kind, x.shape[1], 5, heads=heads, seed=2)
    ref = pm.layer("graph", kind, g, x, w)
    assert ref.shape == (g.num_nodes(), 5 * heads)
    for model in ("tensor", "vertex"):
        out = pm.layer(model, kind, g, x, w)
        assert torch.allclose(out, ref, atol=1e-5, rtol=1e-5), (model, float((out - ref).abs().max()))


def test_graph_centric_gcn_is_dgl_graphconv(graph_and_features):
    g, x = graph_and_features
    w = pm.init_weights("gcn", x.shape[1], 4)
    conv = dgl.nn.GraphConv(x.shape[1], 4, norm="both")
    conv.weight.data.copy_(w.weight)
    conv.bias.data.copy_(w.bias)
    assert torch.allclose(conv(g, x), pm.graph_centric("gcn", g, x, w), atol=1e-5)


def test_graph_centric_backward_matches_tensor_centric(graph_and_features):
    g, x = graph_and_features
    grads = []
    for model in ("graph", "tensor"):
        xs = x.clone().requires_grad_(True)
        pm.layer(model, "gat", g, xs, pm.init_weights("gat", x.shape[1], 3, heads=2)).square().sum().backward()
        grads.append(xs.grad)
    assert torch.allclose(*grads, atol=1e-4)


def test_prepare_graph_is_symmetric_with_one_loop_per_node():
    g = pm.prepare_graph(dgl.graph(([0, 0, 1, 2], [1, 1, 2, 2]), num_nodes=4))
    src, dst = g.edges()
    pairs = set(zip(src.tolist(), dst.tolist()))
    assert pairs == {(0, 1), (1, 0), (1, 2), (2, 1), (0, 0), (1, 1), (2, 2), (3, 3)}
    assert g.num_edges() == len(pairs)


def test_pagerank_agrees_across_models_and_with_dense_power_iteration(graph_and_features):
    g, _ = graph_and_features
    ranks = {m: pm.pagerank(m, g, iterations=40) for m in pm.MODELS}
    n = g.num_nodes()
    adj = torch.zeros(n, n)
    src, dst = g.edges()
    adj[dst, src] = 1.0
    transition = adj / adj.sum(0, keepdim=True)
    r = torch.full((n,), 1.0 / n, dtype=torch.float64)
    for _ in range(40):
        r = 0.15 / n + 0.85 * transition.double() @ r
    for m, got in ranks.items():
        assert torch.allclose(got.double(), r, atol=1e-6), m
    assert abs(float(ranks["graph"].sum()) - 1) < 1e-4


@pytest.mark.parametrize("call, match", [
    (lambda g, x, w: pm.layer("matrix", "gcn", g, x, w), "unknown programming model 'matrix'"),
    (lambda g, x, w: pm.layer("graph", "sage", g, x, w), "unknown layer kind 'sage'"),
    (lambda g, x, w: pm.layer("graph", "gat", g, x, w), "weights are for a 'gcn' layer"),
    (lambda g, x, w: pm.init_weights("gcn", 4, 2, heads=2), "one head"),
    (lambda g, x, w: pm.pagerank("graph", g, damping=1.0), "damping"),
    (lambda g, x, w: pm.pagerank("graph", dgl.graph(([0], [1]))), "out-edge"),
    (lambda g, x, w: pm.time_call(lambda: None, repeat=0), "repeat"),
])
def test_bad_input_is_named(graph_and_features, call, match):
    g, x = graph_and_features
    with pytest.raises(ValueError, match=match):
        call(g, x, pm.init_weights("gcn", x.shape[1], 2))
