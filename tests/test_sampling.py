"""gnnbook.ch5_minibatch.sampling: block shapes, node counts within their bounds, seeded
reproducibility and the bad-input errors of every sampler."""
import dgl
import pytest
import torch

from gnnbook.data import load_dataset
from gnnbook.training.minibatch import Batches, train_minibatch
from gnnbook.training.train import Optim
from gnnbook.graph.neighbourhood import full_receptive_field
from gnnbook.ch5_minibatch.sampling import SAMPLERS, make_loader, make_sampler, sampled_isolation, sampler_loader
from gnnbook.base.seeding import set_seed
from gnnbook.training.train import prepare_graph

OPTIONS = {"neighbor": dict(fanouts=[4, 3]), "labor": dict(fanouts=[4, 3]), "ladies": dict(budget=48),
           "fastgcn": dict(budget=48), "cluster-gcn": dict(num_parts=20, parts_per_batch=2),
           "saint": dict(budget=150)}


@pytest.fixture(scope="module")
def cora():
    return prepare_graph(load_dataset("cora"))


def first_batches(graph, name, seeds, batch_size=32, seed=0, num=3, **options):
    set_seed(seed)
    batches = []
    for batch in make_loader(name, graph, seeds, 2, batch_size, **(options or OPTIONS[name])):
        batches.append(batch)
        if len(batches) == num:
            break
    return batches


def test_every_registered_sampler_is_tested():
    assert set(OPTIONS) == set(SAMPLERS)


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_blocks_chain_and_map_to_graph_edges(cora, name):
    seeds = torch.arange(0, cora.num_nodes(), 5)
    for input_nodes, output_nodes, blocks in first_batches(cora, name, seeds):
        assert len(blocks) == 2
        assert torch.equal(blocks[0].srcdata[dgl.NID], input_nodes)
        assert torch.equal(blocks[-1].dstdata[dgl.NID], output_nodes)
        assert len(output_nodes) > 0 and torch.isin(output_nodes, seeds).all()
        for lower, upper in zip(blocks, blocks[1:]):
            assert torch.equal(lower.dstdata[dgl.NID], upper.srcdata[dgl.NID])  # one layer feeds the next
        for block in blocks:
            nid = block.srcdata[dgl.NID]
            assert torch.equal(nid[:block.num_dst_nodes()], block.dstdata[dgl.NID])  # dst nodes come first
            assert len(torch.unique(nid)) == len(nid)
            src, dst = block.edges()
            assert cora.has_edges_between(nid[src], block.dstdata[dgl.NID][dst]).all()  # every edge is real


def test_node_wise_inputs_within_fanout_product_and_receptive_field(cora):
    seeds = torch.arange(cora.num_nodes())
    for input_nodes, output_nodes, _ in first_batches(cora, "neighbor", seeds, fanouts=[4, 3]):
        bound = len(output_nodes) * (1 + 3) * (1 + 4)
        full = full_receptive_field(cora, output_nodes, 2)[-1]  # saturates at the 2-hop neighbourhood
        assert len(output_nodes) < len(input_nodes) <= min(bound, full)


def test_node_wise_saturates_at_the_reachable_set():
    ring = prepare_graph(dgl.to_bidirected(dgl.graph((torch.arange(12), (torch.arange(12) + 1) % 12))))
    set_seed(0)
    input_nodes, _, _ = next(iter(make_loader("neighbor", ring, torch.tensor([0]), 8, 1, fanouts=[-1] * 8)))
    assert len(input_nodes) == full_receptive_field(ring, [0], 8)[-1] == 12  # the whole ring


@pytest.mark.parametrize("name", ["ladies", "fastgcn"])
def test_layer_wise_inputs_at_most_batch_plus_budget_per_layer(cora, name):
    seeds = torch.arange(cora.num_nodes())
    for layers in (1, 2, 4):
        set_seed(0)
        loader = make_loader(name, cora, seeds, layers, 32, budget=48)
        input_nodes, output_nodes, blocks = next(iter(loader))
        assert len(input_nodes) <= len(output_nodes) + 48 * layers
        for block in blocks:  # each layer adds at most the budget, and does draw new nodes
            assert 0 < block.num_src_nodes() - block.num_dst_nodes() <= 48


def test_ladies_draws_only_neighbours_fastgcn_does_not(cora):
    seeds = torch.arange(cora.num_nodes())
    ladies = sampled_isolation(cora, "ladies", batch_size=32, num_layers=2, seed_nodes=seeds, budget=64)
    fastgcn = sampled_isolation(cora, "fastgcn", batch_size=32, num_layers=2, seed_nodes=seeds, budget=64)
    assert ladies["disconnected_fraction"] == 0.0
    assert fastgcn["disconnected_fraction"] > 0.5
    assert fastgcn["unreached_fraction"] > ladies["unreached_fraction"]


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_seeded_sampling_repeats(cora, name):
    seeds = torch.arange(0, cora.num_nodes(), 3)
    a, b, c = (first_batches(cora, name, seeds, seed=s) for s in (0, 0, 1))
    same = lambda x, y: all(torch.equal(p[0], q[0]) and torch.equal(p[1], q[1]) for p, q in zip(x, y))
    assert same(a, b)
    assert not same(a, c)


def test_cluster_gcn_leaves_no_cache_file(cora, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_sampler("cluster-gcn", cora, 2, 1, seed_nodes=torch.arange(10), num_parts=8)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["ladies", "cluster-gcn"])
def test_training_through_a_sampler_learns_and_repeats(name):
    graph = load_dataset("cora")
    run = lambda: train_minibatch(graph, "gcn", Optim(0, epochs=6, patience=6),
                                  Batches(batch_size=32, loader=sampler_loader(name, 2, 32, **OPTIONS[name])),
                                  progress=False)
    first, second = run(), run()
    assert first.test_acc == second.test_acc
    assert first.test_acc > 0.3  # 7 classes: chance is ~0.14


def test_unknown_sampler_names_the_choices(cora):
    with pytest.raises(ValueError, match="unknown sampler 'graphsage'.*neighbor.*ladies.*saint"):
        make_sampler("graphsage", cora, 2, 32)


def test_layer_wise_budget_below_the_batch_is_refused(cora):
    with pytest.raises(ValueError, match=r"budget \[16, 16\] is smaller than the batch \(32.*budget >= 32"):
        make_sampler("ladies", cora, 2, 32, budget=16)


def test_missing_and_unknown_options(cora):
    with pytest.raises(ValueError, match="needs fanouts"):
        make_sampler("neighbor", cora, 2, 32)
    with pytest.raises(ValueError, match="got unknown fanout"):
        make_sampler("labor", cora, 2, 32, fanout=[5, 5])
    with pytest.raises(ValueError, match="2-layer model"):
        make_sampler("neighbor", cora, 2, 32, fanouts=[5])


def test_a_property_the_graph_lacks(cora):
    with pytest.raises(ValueError, match=r"edata\['weight'\], which the graph lacks"):
        make_sampler("labor", cora, 2, 32, fanouts=[5, 5], prob="weight")
    hetero = dgl.heterograph({("a", "to", "b"): ([0], [0]), ("b", "to", "a"): ([0], [0])})
    with pytest.raises(ValueError, match="homogeneous"):
        make_sampler("fastgcn", hetero, 2, 1, budget=4)
