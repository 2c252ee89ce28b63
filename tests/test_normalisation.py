"""GCN's one normalisation against independent computations: a dense ``D_in^-1/2 A D_out^-1/2`` in numpy
(float64) and DGL's ``GraphConv(norm="both")``, on a directed graph with nodes of zero in- and out-degree."""
import dgl
import numpy as np
import torch
from dgl.nn import GraphConv

from gnnbook.graph.normalisation import gcn_dense_adjacency, gcn_edge_weights, inverse_sqrt_degrees

# edges u -> v; node 4 has no in-edge, node 5 no out-edge, node 6 none at all; a self-loop and a repeated edge
SRC = torch.tensor([0, 0, 1, 2, 2, 3, 4, 4, 1, 1])
DST = torch.tensor([1, 2, 2, 0, 5, 3, 0, 5, 2, 3])
N = 7


def numpy_normalised(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """Row = destination: ``A[v, u]`` counts the edges ``u -> v``, scaled by in_deg(v)^-1/2 out_deg(u)^-1/2."""
    a = np.zeros((n, n))
    np.add.at(a, (dst, src), 1.0)
    out_deg, in_deg = a.sum(0), a.sum(1)
    inv = lambda d: np.divide(1.0, np.sqrt(d), out=np.zeros_like(d), where=d > 0)  # noqa: E731
    return inv(in_deg)[:, None] * a * inv(out_deg)[None, :]


def test_edge_weights_match_a_dense_numpy_normalisation_with_zero_degree_nodes():
    g = dgl.graph((SRC, DST), num_nodes=N)
    weights = gcn_edge_weights(SRC, DST, g.out_degrees(), g.in_degrees())
    assert weights.dtype == torch.float32
    assembled = np.zeros((N, N))
    np.add.at(assembled, (DST.numpy(), SRC.numpy()), weights.double().numpy())
    expected = numpy_normalised(SRC.numpy(), DST.numpy(), N)
    np.testing.assert_allclose(assembled, expected, rtol=1e-6, atol=1e-7)
    # out = in degree of an isolated node is 0: its factor is 0, not inf
    assert inverse_sqrt_degrees(g.in_degrees())[[4, 6]].tolist() == [0.0, 0.0]
    assert torch.isfinite(weights).all()


def test_edge_weights_aggregate_as_dgl_graphconv_norm_both():
    g = dgl.graph((SRC, DST), num_nodes=N)
    x = torch.randn(N, 3, generator=torch.Generator().manual_seed(0))
    conv = GraphConv(3, 3, norm="both", weight=False, bias=False, allow_zero_in_degree=True)
    weights = gcn_edge_weights(SRC, DST, g.out_degrees(), g.in_degrees())
    ours = torch.zeros(N, 3).index_add_(0, DST, x[SRC] * weights[:, None])
    torch.testing.assert_close(ours, conv(g, x), rtol=1e-6, atol=1e-6)


def test_dense_adjacency_matches_numpy_on_a_weighted_graph_with_an_isolated_node():
    rng = np.random.default_rng(0)
    a = rng.random((6, 6)) * (rng.random((6, 6)) < 0.5)
    a = a + a.T
    a[2], a[:, 2] = 0.0, 0.0                                     # isolated: its row and column stay zero
    deg = a.sum(1)
    inv = np.divide(1.0, np.sqrt(deg), out=np.zeros_like(deg), where=deg > 0)
    ours = gcn_dense_adjacency(torch.from_numpy(a))
    assert ours.dtype == torch.float32 and torch.isfinite(ours).all()
    np.testing.assert_allclose(ours.double().numpy(), inv[:, None] * a * inv[None, :], rtol=1e-6, atol=1e-7)
