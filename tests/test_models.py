"""gnnbook.models: every parameter used, blocks == full graph, GCN on blocks by a dense formula, sparse == dense,
GCN == DGL's GraphConv, GAT == DGL's GATConv, GraphSAGE == DGL's SAGEConv with the mean aggregator (and its
formula), GIN == DGL's GINConv, GGNN == DGL's GatedGraphConv: outputs and gradients on the same weights."""
import dgl
import dgl.nn as dglnn
import pytest
import torch

from gnnbook.data import load_dataset
from gnnbook.models import GCN, MODEL_DEFAULTS, VGAE, build_model
from gnnbook.training.train import prepare_graph


@pytest.fixture(scope="module")
def graph():
    return prepare_graph(load_dataset("sbm", num_nodes=400, avg_degree=6, num_features=16, num_classes=4))


@pytest.mark.parametrize("name", list(MODEL_DEFAULTS))
def test_every_parameter_is_used_and_gets_a_gradient(graph, name):
    model = build_model(name, 16, 4).eval()
    out = model(graph, graph.ndata["feat"])
    assert out.shape == (graph.num_nodes(), 4)
    out.pow(2).sum().backward()
    unused = [n for n, p in model.named_parameters() if p.requires_grad and (p.grad is None or not p.grad.any())]
    assert not unused, f"parameters outside the forward pass: {unused}"


@pytest.mark.parametrize("name", ["gat", "sage", "gin"])
def test_blocks_forward_matches_output_nodes(graph, name):
    torch.manual_seed(0)
    model = build_model(name, 16, 4).eval()
    seeds = torch.arange(10)
    sampler = dgl.dataloading.MultiLayerFullNeighborSampler(2)
    input_nodes, output_nodes, blocks = sampler.sample_blocks(graph, seeds)
    out_blocks = model(blocks, graph.ndata["feat"][input_nodes])
    out_full = model(graph, graph.ndata["feat"])[output_nodes]
    assert torch.allclose(out_blocks, out_full, atol=1e-5), "full neighbourhood blocks equal full-graph inference"


def test_gcn_on_blocks_normalises_by_block_degrees(graph):
    """GraphConv's symmetric norm uses the degrees inside each block, so GCN on
    sampled blocks is not full-graph GCN even with every neighbour sampled."""
    torch.manual_seed(0)
    model = build_model("gcn", 16, 4).eval()
    sampler = dgl.dataloading.MultiLayerFullNeighborSampler(2)
    input_nodes, output_nodes, blocks = sampler.sample_blocks(graph, torch.arange(10))
    out = model(blocks, graph.ndata["feat"][input_nodes])
    h = graph.ndata["feat"][input_nodes] @ model.input.weight
    for i, (block, layer) in enumerate(zip(blocks, model.layers)):   # dense: D_dst^-1/2 A D_src^-1/2 h W + b
        src, dst = block.edges()
        adj = torch.zeros(block.num_dst_nodes(), block.num_src_nodes())
        adj.index_put_((dst, src), torch.ones(len(src)), accumulate=True)
        adj = adj / adj.sum(1, keepdim=True).clamp(min=1).sqrt() / adj.sum(0, keepdim=True).clamp(min=1).sqrt()
        h = adj @ (h if layer.weight is None else h @ layer.weight) + layer.bias
        h = torch.relu(h) if i == 0 else h
    assert torch.allclose(out, h, atol=1e-5), "block degrees"
    assert not torch.allclose(out, model(graph, graph.ndata["feat"])[output_nodes], atol=1e-3), "not full-graph GCN"


def test_ggnn_refuses_blocks(graph):
    with pytest.raises(ValueError, match="full-graph"):
        build_model("ggnn", 16, 4)(["a"], graph.ndata["feat"])


def test_gcn_equals_dgl_graphconv(graph):
    """Our GCN (projection, then propagation) is DGL's two GraphConv layers."""
    torch.manual_seed(0)
    ours = GCN(16, 4, hidden=8).eval()
    ref1, ref2 = dglnn.GraphConv(16, 8), dglnn.GraphConv(8, 4)
    with torch.no_grad():
        ref1.weight.copy_(ours.input.weight)
        ref1.bias.copy_(ours.layers[0].bias)
        ref2.weight.copy_(ours.layers[1].weight)
        ref2.bias.copy_(ours.layers[1].bias)
    x = graph.ndata["feat"]
    expected = ref2(graph, torch.relu(ref1(graph, x)))
    assert torch.allclose(ours(graph, x), expected, atol=1e-5)


def test_gat_equals_dgl_gatconv(graph):
    """Our GAT (its first projection an InputLinear) is DGL's two GATConv layers: heads concatenated
    after ELU, then one head averaged."""
    torch.manual_seed(0)
    ours = build_model("gat", 16, 4).eval()
    ref1, ref2 = dglnn.GATConv(16, 8, 8), dglnn.GATConv(64, 4, 1)
    with torch.no_grad():
        ref1.fc.weight.copy_(ours.input.weight.T)
        for name in ("attn_l", "attn_r", "bias"):
            getattr(ref1, name).copy_(getattr(ours.layers[0], name))
        ref2.load_state_dict(ours.layers[1].state_dict())
    x = graph.ndata["feat"]
    expected = ref2(graph, torch.nn.functional.elu(ref1(graph, x).flatten(1))).mean(1)
    assert torch.allclose(ours(graph, x), expected, atol=1e-5)


@pytest.mark.parametrize("name", ["gcn", "gat"])
def test_sparse_input_equals_dense_input(name):
    g = prepare_graph(load_dataset("cora"))
    model = build_model(name, 1433, 7).eval()
    x = g.ndata["feat"]
    assert torch.allclose(model(g, x), model(g, x.to_sparse_csr()), atol=1e-5)


def test_unknown_model():
    with pytest.raises(ValueError, match="known models: gcn, gat"):
        build_model("transformer", 4, 2)


def test_vgae_scores_are_inner_products(graph):
    model = VGAE(16).eval()
    z, mean, _ = model.encode(graph, graph.ndata["feat"])
    assert torch.equal(z, mean), "evaluation uses the mean embedding"
    assert torch.allclose(model.score(z, torch.tensor([1]), torch.tensor([2])),
                          (z[1] * z[2]).sum(-1, keepdim=True).squeeze(-1))


def _grads(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in module.parameters() if p.grad is not None]


def _same_outputs_and_gradients(ours, ours_out, reference, reference_out, ours_params, reference_params):
    """The outputs agree, and so do the gradients of the same loss on parameters that correspond."""
    assert torch.allclose(ours_out, reference_out, atol=1e-5), (ours_out - reference_out).abs().max()
    ours_out.pow(2).sum().backward()
    reference_out.pow(2).sum().backward()
    for a, b in zip(ours_params, reference_params, strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-4), (a.grad - b.grad).abs().max()


def test_sage_is_the_mean_aggregator_of_dgl_sageconv_and_of_its_formula(graph):
    """GraphSAGE's default (the only aggregator the course uses) is the mean: DGL's SAGEConv(aggregator_type=
    "mean") on the same weights, and h'_v = W_self h_v + W_neigh mean_{u in N(v)} h_u + b by hand."""
    torch.manual_seed(0)
    ours = build_model("sage", 16, 4, hidden=8).eval()
    refs = [dglnn.SAGEConv(16, 8, "mean"), dglnn.SAGEConv(8, 4, "mean")]
    for ref, layer in zip(refs, ours.layers):
        ref.load_state_dict(layer.state_dict())
    x = graph.ndata["feat"]
    expected = refs[1](graph, torch.relu(refs[0](graph, x)))
    out = ours(graph, x)
    src, dst = graph.edges()
    adj = torch.zeros(graph.num_nodes(), graph.num_nodes()).index_put_((dst, src), torch.ones(len(src)),
                                                                       accumulate=True)
    mean = adj / adj.sum(1, keepdim=True).clamp(min=1)
    h = x
    for i, layer in enumerate(ours.layers):
        h = layer.fc_self(h) + layer.fc_neigh(mean @ h)  # the mean aggregator's bias is fc_self's
        h = torch.relu(h) if i == 0 else h
    assert torch.allclose(out, h, atol=1e-5), "the mean aggregator's formula"
    _same_outputs_and_gradients(ours, out, refs, expected, list(ours.parameters()),
                                [p for ref in refs for p in ref.parameters()])


def test_gin_equals_dgl_ginconv_sum_with_a_learnt_epsilon(graph):
    """GIN (Xu et al. 2019): h'_v = MLP((1 + eps) h_v + sum_{u in N(v)} h_u), eps learnt: DGL's GINConv."""
    torch.manual_seed(0)
    ours = build_model("gin", 16, 4, hidden=8).eval()
    with torch.no_grad():
        for layer in ours.layers:
            layer.eps.fill_(0.25)  # a non-zero epsilon, so that its term is tested too
    refs = []
    for a, b, layer in zip((16, 8), (8, 4), ours.layers):
        mlp = torch.nn.Sequential(torch.nn.Linear(a, 8), torch.nn.ReLU(), torch.nn.Linear(8, b))
        ref = dglnn.GINConv(mlp, "sum", learn_eps=True)
        ref.load_state_dict(layer.state_dict())
        refs.append(ref)
    x = graph.ndata["feat"]
    expected = refs[1](graph, torch.relu(refs[0](graph, x)))
    src, dst = graph.edges()
    adj = torch.zeros(graph.num_nodes(), graph.num_nodes()).index_put_((dst, src), torch.ones(len(src)),
                                                                       accumulate=True)
    by_hand = refs[0].apply_func(1.25 * x + adj @ x)
    assert torch.allclose(refs[0](graph, x), by_hand, atol=1e-5), "the sum aggregator with (1 + eps)"
    _same_outputs_and_gradients(ours, ours(graph, x), refs, expected, list(ours.parameters()),
                                [p for ref in refs for p in ref.parameters()])


def test_ggnn_equals_dgl_gatedgraphconv_between_its_projections(graph):
    """GGNN (Li et al. 2016): a linear projection into the state, `steps` rounds of DGL's GatedGraphConv
    (messages summed, a GRU update), a linear classifier."""
    torch.manual_seed(0)
    steps = 3
    ours = build_model("ggnn", 16, 4, hidden=8, steps=steps).eval()
    project, classify = torch.nn.Linear(16, 8), torch.nn.Linear(8, 4)
    gated = dglnn.GatedGraphConv(8, 8, steps, 1)
    project.load_state_dict(ours.project.state_dict())
    classify.load_state_dict(ours.classify.state_dict())
    gated.load_state_dict(ours.gated[0].state_dict())
    x = graph.ndata["feat"]
    expected = classify(gated(graph, torch.relu(project(x))))
    reference = [*project.parameters(), *gated.parameters(), *classify.parameters()]
    mine = [*ours.project.parameters(), *ours.gated[0].parameters(), *ours.classify.parameters()]
    _same_outputs_and_gradients(ours, ours(graph, x), gated, expected, mine, reference)
