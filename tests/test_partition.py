"""Graph partitioning (6.2.1): one metrics function for any assignment, checked on a hand-made
graph; every partitioner's metrics; random ~ 1 - 1/K; METIS < LDG/Fennel < random; balance slack."""
import dgl
import numpy as np
import pytest
import torch

from gnnbook.ch6_fullgraph import partitioners as P
from gnnbook.data import load_dataset


def two_triangles():
    # triangles 0-1-2 and 3-4-5, bridged by 2-3; every edge in both directions (14 edges)
    und = [(0, 1), (1, 2), (0, 2), (3, 4), (4, 5), (3, 5), (2, 3)]
    src = [u for u, v in und] + [v for u, v in und]
    dst = [v for u, v in und] + [u for u, v in und]
    return dgl.graph((torch.tensor(src), torch.tensor(dst)))


def test_metrics_by_hand():
    m = P.partition_metrics(two_triangles(), torch.tensor([0, 0, 0, 1, 1, 1]))
    assert m["cut_edges"] == 2 and m["edge_cut"] == pytest.approx(2 / 14)
    assert m["halo_sizes"] == [1, 1]                      # node 3 is part 0's halo, node 2 part 1's
    assert m["replication_factor"] == pytest.approx(8 / 6)
    assert m["vertex_balance"] == 1.0 and m["edge_balance"] == 1.0
    m = P.partition_metrics(two_triangles(), [0, 1, 0, 1, 0, 1])
    # cut: 0-1, 1-2, 2-3, 3-4, 4-5, both ways = 10 of 14; halos: part 0 {1, 3, 5}, part 1 {0, 2, 4}
    assert m["cut_edges"] == 10 and m["halo_sizes"] == [3, 3] and m["replication_factor"] == 2.0
    m = P.partition_metrics(two_triangles(), [0, 0, 0, 0, 0, 1])
    # node 5 has in-edges from 3 and 4
    assert m["vertex_balance"] == pytest.approx(5 / 3) and m["part_edges"] == [12, 2]
    assert m["edge_balance"] == pytest.approx(12 / 7)


@pytest.mark.parametrize("method", P.METHODS)
def test_every_partitioner_on_the_hand_made_graph(method):
    g = two_triangles()
    a = P.partition(g, 2, method)
    assert a.dtype == torch.int64 and len(a) == 6 and set(a.tolist()) == {0, 1}
    m = P.partition_metrics(g, a)
    assert m["vertex_balance"] <= 4 / 3 + 1e-9          # 3/3, or 4/2 at worst for ceil(1.1 * 3) = 4
    if method in ("metis", "pymetis", "ldg", "fennel"):
        # the two triangles are the only cut of one edge pair; METIS finds it, so do the greedy
        # streams here (checked by hand: every order keeps each triangle together or cuts <= 6)
        assert m["cut_edges"] <= (2 if "metis" in method else 6), (method, a.tolist())


@pytest.mark.parametrize("k", [2, 4])
def test_cut_ordering_and_balance_on_cora(k):
    g = load_dataset("cora")
    rows = {r["method"]: r for r in P.compare(g, k, P.METHODS)}
    assert abs(rows["random"]["edge_cut"] - (1 - 1 / k)) <= 0.05
    for streaming in ("ldg", "fennel"):
        assert rows["metis"]["edge_cut"] < 0.5 * rows[streaming]["edge_cut"]
        assert rows[streaming]["edge_cut"] < rows["random"]["edge_cut"]
        assert rows[streaming]["vertex_balance"] <= 1.1 + k / g.num_nodes()   # capacity ceil(1.1 N / K)
    assert rows["pymetis"]["edge_cut"] < 0.5 * rows["ldg"]["edge_cut"]
    assert rows["metis"]["replication_factor"] < rows["random"]["replication_factor"]


def test_streaming_balance_slack_holds_on_a_power_law_graph():
    g = load_dataset("powerlaw", num_nodes=3000, avg_degree=10)
    for slack in (1.02, 1.2):
        for fn in (P.ldg, P.fennel):
            sizes = np.bincount(fn(g, 3, slack=slack), minlength=3)
            assert sizes.max() <= np.ceil(slack * 3000 / 3), (fn.__name__, slack, sizes)


def test_vertex_cut():
    g = two_triangles()
    m = P.vertex_cut_metrics(g, torch.zeros(7, dtype=torch.int64), 2)
    assert m["replication_factor"] == 1.0 and m["part_edges"] == [7, 0]
    u, v = P.undirected_edges(g)
    assert list(zip(u.tolist(), v.tolist())) == [(0, 1), (0, 2), (1, 2), (2, 3), (3, 4), (3, 5), (4, 5)]
    # edge 2-3 on its own part: nodes 2 and 3 get a second copy
    m = P.vertex_cut_metrics(g, torch.tensor([0, 0, 0, 1, 0, 0, 0]), 2)
    assert m["replication_factor"] == pytest.approx(8 / 6)
    cora = load_dataset("cora")
    greedy = P.vertex_cut_metrics(cora, P.vertex_cut(cora, 4, "greedy"), 4)
    rand = P.vertex_cut_metrics(cora, P.vertex_cut(cora, 4, "random"), 4)
    assert greedy["replication_factor"] < rand["replication_factor"] and greedy["edge_balance"] < 1.05


def test_bad_input_is_named():
    g = two_triangles()
    with pytest.raises(ValueError, match="one part id per node"):
        P.partition_metrics(g, [0, 1, 0])
    with pytest.raises(ValueError, match=r"parts \[1\] of 3 are empty"):
        P.partition_metrics(g, [0, 0, 0, 2, 2, 2])
    with pytest.raises(ValueError, match="part ids must lie in 0..1"):
        P.partition_metrics(g, [0, 0, 0, 1, 1, 2], num_parts=2)
    with pytest.raises(ValueError, match="num_parts must lie in 1..6"):
        P.partition(g, 7, "random")
    with pytest.raises(ValueError, match="unknown partitioner 'kl'; choose one of random, ldg"):
        P.partition(g, 2, "kl")
    with pytest.raises(ValueError, match="unknown vertex-cut method"):
        P.vertex_cut(g, 2, "hdrf")
    with pytest.raises(ValueError, match="7 undirected edges"):
        P.vertex_cut_metrics(g, [0, 1], 2)
