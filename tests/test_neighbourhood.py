"""Receptive fields: exact BFS counts, DGL-sampled counts, and their bounds."""
import dgl
import pytest
import torch

from gnnbook.data import load_dataset
from gnnbook.graph.neighbourhood import (
    fanout_product,
    full_receptive_field,
    random_seeds,
    reachable_nodes,
    sampled_receptive_field,
    sampling_bound,
)


@pytest.fixture(scope="module")
def powerlaw():
    return load_dataset("powerlaw", num_nodes=3000, avg_degree=10, seed=0)


def _path(n):
    """Undirected path 0 - 1 - ... - n-1, both edge directions stored."""
    u = torch.arange(n - 1)
    return dgl.graph((torch.cat([u, u + 1]), torch.cat([u + 1, u])), num_nodes=n)


def test_path_graph_counts_are_exact():
    g = _path(10)
    assert full_receptive_field(g, [0], 4) == [1, 2, 3, 4, 5]
    assert full_receptive_field(g, [5], 3) == [1, 3, 5, 7]
    assert full_receptive_field(g, [0, 9], 2) == [2, 4, 6]
    # No node of a path has more than 2 neighbours: fanout 2 takes them all.
    assert sampled_receptive_field(g, [0], [2, 2, 2], seed=3) == [1, 2, 3, 4]
    # Fanout 1 from an end node: hop 1 must take node 1; hop 2 adds 2 or nothing new.
    assert sampled_receptive_field(g, [0], [1, 1], seed=3)[:2] == [1, 2]


def test_direction_follows_messages():
    # Edges 1 -> 0 and 0 -> 2: only node 1 sends messages to node 0.
    g = dgl.graph((torch.tensor([1, 0]), torch.tensor([0, 2])), num_nodes=3)
    assert full_receptive_field(g, [0], 2) == [1, 2, 2]
    assert full_receptive_field(g, [2], 2) == [1, 2, 3]
    assert reachable_nodes(g, [0]) == 2


def test_monotone_and_bounded(powerlaw):
    seeds = random_seeds(powerlaw, 16, seed=0)
    full = full_receptive_field(powerlaw, seeds, 4)
    assert full[0] == 16
    assert all(a <= b for a, b in zip(full, full[1:])), full
    assert full[-1] <= reachable_nodes(powerlaw, seeds) <= powerlaw.num_nodes()
    for fanouts in ([2, 2, 2, 2], [5, 10, 3], [25]):
        sampled = sampled_receptive_field(powerlaw, seeds, fanouts, seed=1)
        bound = sampling_bound(16, fanouts, num_nodes=powerlaw.num_nodes())
        assert len(sampled) == len(fanouts) + 1 and sampled[0] == 16
        assert all(a <= b for a, b in zip(sampled, sampled[1:])), sampled
        assert all(s <= b for s, b in zip(sampled, bound)), (sampled, bound)
        # A sampled neighbour is a neighbour: never more than the full field.
        assert all(s <= f for s, f in zip(sampled, full)), (sampled, full)


def test_full_fanout_equals_breadth_first_search(powerlaw):
    seeds = random_seeds(powerlaw, 8, seed=2)
    assert sampled_receptive_field(powerlaw, seeds, [-1, -1, -1]) == full_receptive_field(powerlaw, seeds, 3)


def test_saturates_at_the_connected_component(powerlaw):
    seeds = random_seeds(powerlaw, 4, seed=3)
    limit = reachable_nodes(powerlaw, seeds)
    assert full_receptive_field(powerlaw, seeds, 30)[-1] == limit
    # Two components: a seed in one never reaches the other.
    two = dgl.batch([_path(5), _path(7)])
    assert reachable_nodes(two, [0]) == 5 and reachable_nodes(two, [6]) == 7
    assert full_receptive_field(two, [0], 10)[-1] == 5


def test_close_to_the_bound_when_degrees_exceed_fanouts():
    # Every node has ~100 in-neighbours among 10k: a fanout of 5 is always
    # fully used and overlaps are rare, so the count nearly reaches the bound.
    dgl.seed(0)
    g = dgl.rand_graph(10_000, 1_000_000)
    seeds = torch.arange(10)
    sampled = sampled_receptive_field(g, seeds, [5, 5], seed=0)
    bound = sampling_bound(10, [5, 5])
    assert sampled[1] == bound[1]
    assert sampled[2] >= 0.95 * bound[2], (sampled, bound)


def test_seeded_sampling_repeats(powerlaw):
    seeds = random_seeds(powerlaw, 32, seed=0)
    a = sampled_receptive_field(powerlaw, seeds, [10, 10], seed=7)
    assert a == sampled_receptive_field(powerlaw, seeds, [10, 10], seed=7)
    others = {tuple(sampled_receptive_field(powerlaw, seeds, [10, 10], seed=s)) for s in range(5)}
    assert len(others) > 1, "different sampler seeds should draw different neighbours"
    assert torch.equal(random_seeds(powerlaw, 32, seed=0), seeds)


def test_bounds_arithmetic():
    assert sampling_bound(10, [25, 10]) == [10, 260, 2860]
    assert sampling_bound(10, [25, 10], num_nodes=1000) == [10, 260, 1000]
    assert fanout_product(64, [15, 10, 5]) == [64, 960, 9600, 48000]


@pytest.mark.parametrize("call, message", [
    (lambda g: full_receptive_field(g, [], 2), "empty"),
    (lambda g: full_receptive_field(g, [99], 2), r"\[0, 10\)"),
    (lambda g: full_receptive_field(g, [0], -1), "num_layers"),
    (lambda g: sampled_receptive_field(g, [0], [0]), "fanout"),
    (lambda g: sampled_receptive_field(g, [0], []), "fanouts is empty"),
    (lambda g: sampling_bound(4, [-1]), "maximum degree"),
    (lambda g: random_seeds(g, 11), "batch_size"),
])
def test_bad_input_is_named(call, message):
    with pytest.raises(ValueError, match=message):
        call(_path(10))


def test_sampling_repeats_on_a_large_frontier():
    # Large frontiers are where DGL spreads sampling over threads; counts must still repeat.
    g = load_dataset("powerlaw", num_nodes=20_000, avg_degree=10, seed=0)
    seeds = random_seeds(g, 64, seed=0)
    runs = {tuple(sampled_receptive_field(g, seeds, [10, 10, 10, 10], seed=0)) for _ in range(3)}
    assert len(runs) == 1, runs
