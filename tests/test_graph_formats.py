"""COO / CSR / CSC: construction, conversions, memory, and agreement with DGL and scipy."""
import dgl
import numpy as np
import pytest
import torch

from gnnbook.graph.storage import COO, CSC, CSR, from_dgl, memory_table


def random_coo(num_nodes=50, num_edges=300, seed=0, dtype=np.int64):
    rng = np.random.default_rng(seed)
    # duplicates and self-loops on purpose: formats must keep every edge
    return COO(rng.integers(0, num_nodes, num_edges), rng.integers(0, num_nodes, num_edges), num_nodes, dtype=dtype)


def sorted_segments(fmt):
    """indices sorted within each node's slice (conversions may order neighbours differently)."""
    keys = np.repeat(np.arange(fmt.num_nodes), fmt.degrees())
    return fmt.indices[np.lexsort((fmt.indices, keys))]


def edge_multiset(coo):
    return sorted(zip(coo.src.tolist(), coo.dst.tolist()))


def test_small_graph_by_hand():
    #  0 -> 1, 0 -> 2, 2 -> 1, node 3 isolated
    coo = COO([0, 0, 2], [1, 2, 1], num_nodes=4)
    csr, csc = coo.to_csr(), coo.to_csc()
    assert csr.indptr.tolist() == [0, 2, 2, 3, 3]
    assert csr.indices.tolist() == [1, 2, 1]
    assert csc.indptr.tolist() == [0, 0, 2, 3, 3]
    assert csc.indices.tolist() == [0, 2, 0]
    assert csr.neighbors(3).size == 0 and csc.neighbors(1).tolist() == [0, 2]
    assert csr.degrees().tolist() == [2, 0, 1, 0]
    assert csc.degrees().tolist() == [0, 2, 1, 0]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_round_trips_keep_every_edge(seed):
    coo = random_coo(seed=seed)
    csr, csc = coo.to_csr(), coo.to_csc()
    assert edge_multiset(csr.to_coo()) == edge_multiset(coo)
    assert edge_multiset(csc.to_coo()) == edge_multiset(coo)
    np.testing.assert_array_equal(csr.to_csc().indptr, csc.indptr)
    np.testing.assert_array_equal(sorted_segments(csr.to_csc()), sorted_segments(csc))
    np.testing.assert_array_equal(csc.to_csr().indptr, csr.indptr)
    np.testing.assert_array_equal(sorted_segments(csc.to_csr()), sorted_segments(csr))


def test_same_matrix_as_scipy():
    coo = random_coo(seed=3)
    dense = coo.to_scipy().toarray()
    np.testing.assert_array_equal(coo.to_csr().to_scipy().toarray(), dense)
    np.testing.assert_array_equal(coo.to_csc().to_scipy().toarray(), dense)
    # without duplicate edges, scipy's own compression gives the same arrays
    pairs = np.unique(np.stack([coo.src, coo.dst], 1), axis=0)
    simple = COO(pairs[:, 0], pairs[:, 1], coo.num_nodes)
    for ours, theirs in ((simple.to_csr(), simple.to_scipy().tocsr()), (simple.to_csc(), simple.to_scipy().tocsc())):
        theirs.sort_indices()
        np.testing.assert_array_equal(ours.indptr, theirs.indptr)
        np.testing.assert_array_equal(sorted_segments(ours), theirs.indices)


def test_memory_counts_follow_the_formulas():
    coo = random_coo(num_nodes=40, num_edges=200)
    n, e = coo.num_nodes, coo.num_edges
    assert coo.num_indices == 2 * e
    assert coo.to_csr().num_indices == coo.to_csc().num_indices == (n + 1) + e
    assert coo.nbytes == 8 * 2 * e and coo.to_csr().nbytes == 8 * ((n + 1) + e)
    small = random_coo(num_nodes=40, num_edges=200, dtype=np.int32)
    assert small.nbytes * 2 == coo.nbytes
    assert small.to_csr().indices.dtype == np.int32 and small.to_csr().nbytes * 2 == coo.to_csr().nbytes
    rows = {r["format"]: r for r in memory_table(coo)}
    assert rows["COO"]["bytes"] == coo.nbytes and rows["CSC"]["indices"] == n + 1 + e
    assert {r["format"]: r["bytes"] for r in memory_table(coo, np.int32)}["CSR"] == 4 * (n + 1 + e)


def test_neighbours_match_dgl_in_order():
    coo = random_coo(num_nodes=30, num_edges=150, seed=4)
    g = dgl.graph((torch.from_numpy(coo.src), torch.from_numpy(coo.dst)), num_nodes=coo.num_nodes)
    got = from_dgl(g)
    np.testing.assert_array_equal(got.src, coo.src)
    csr, csc = got.to_csr(), got.to_csc()
    for v in range(g.num_nodes()):
        np.testing.assert_array_equal(csr.neighbors(v), g.successors(v).numpy())
        np.testing.assert_array_equal(csc.neighbors(v), g.predecessors(v).numpy())
    np.testing.assert_array_equal(csr.degrees(), g.out_degrees().numpy())
    np.testing.assert_array_equal(csc.degrees(), g.in_degrees().numpy())


def test_empty_and_edgeless_graphs():
    empty = COO([], [], num_nodes=0)
    assert empty.to_csr().indptr.tolist() == [0] and empty.to_csc().num_indices == 1
    edgeless = COO(np.array([], dtype=np.int64), np.array([], dtype=np.int64), num_nodes=3)
    assert edgeless.to_csr().indptr.tolist() == [0, 0, 0, 0]
    assert edgeless.to_csr().to_coo().num_edges == 0


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="one entry per edge"):
        COO([0, 1], [1], num_nodes=2)
    with pytest.raises(ValueError, match="outside"):
        COO([0, 5], [1, 1], num_nodes=3)
    with pytest.raises(ValueError, match="outside"):
        COO([-1], [1], num_nodes=3)
    with pytest.raises(TypeError, match="integers"):
        COO([0.5], [1.0], num_nodes=3)
    with pytest.raises(ValueError, match="int32 or int64"):
        COO([0], [1], num_nodes=3, dtype=np.float32)
    with pytest.raises(ValueError, match="num_nodes \\+ 1"):
        CSR([0, 1], [0], num_nodes=2)
    with pytest.raises(ValueError, match="never decrease"):
        CSC([0, 2, 1], [0], num_nodes=2)
    with pytest.raises(ValueError, match="outside"):
        CSR([0, 1, 1], [7], num_nodes=2)
    with pytest.raises(IndexError, match="out of range"):
        COO([0], [1], num_nodes=2).to_csr().neighbors(2)
    hetero = dgl.heterograph({("a", "r", "b"): (torch.tensor([0]), torch.tensor([0]))})
    with pytest.raises(ValueError, match="homogeneous"):
        from_dgl(hetero)
