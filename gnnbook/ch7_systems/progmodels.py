"""One GNN layer written in the three programming models of GNN systems (book section 7.1).

Book: 7.1 programming models; 7.2 GNN systems and graph processing.

Used in: chapters/07_gnn_systems.ipynb.

- **Tensor-centric** (PyTorch Geometric; Fey & Lenssen, ICLR RLGM workshop 2019): the graph is
  an ``edge_index`` tensor, and a layer is gathers, scatters and dense products on tensors
  indexed by it (PyG's ``GCNConv`` / ``GATConv``).
- **Graph-centric** (DGL; Wang et al., arXiv:1909.01315, 2019): the whole graph is one object
  and a layer is a message-passing call on it (``update_all`` with a message and a reduce
  function, ``apply_edges``, ``edge_softmax``), run as sparse kernels.
- **Vertex-centric** (NeuGraph's SAGA-NN; Ma et al., USENIX ATC 2019, section 3): a program
  for one vertex in four stages, Scatter (what an edge carries from its source), ApplyEdge
  (a per-edge function: an attention score), Gather (accumulate the edges into a vertex) and
  ApplyVertex (a per-vertex network: the weight product), run here by a plain Python loop over
  vertices, as graph-processing systems in the Pregel / GAS tradition express programs.

All three compute the same GCN (symmetric normalisation, ``D^-1/2 A D^-1/2 X W + b``) and GAT
(one or more heads, LeakyReLU slope 0.2, concatenated heads) layer from the same
:class:`LayerWeights` on the same graph.  :func:`pagerank` runs the classic graph algorithm on
the same engines (section 7.2): the engine is what GNN systems inherit from graph processing;
what they add is dense feature vectors, learned weights and a backward pass.

Example:
    >>> import dgl, torch
    >>> g = prepare_graph(dgl.graph(([0, 1, 2], [1, 2, 0])))
    >>> x = torch.randn(3, 4)
    >>> w = init_weights("gcn", 4, 2)
    >>> outs = [layer(model, "gcn", g, x, w) for model in MODELS]
    >>> all(torch.allclose(outs[0], o, atol=1e-5) for o in outs)
    True
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import dgl
import dgl.function as fn
import numpy as np
import torch
import torch.nn.functional as F
from dgl.nn.functional import edge_softmax

__all__ = ["MODELS", "KINDS", "LayerWeights", "init_weights", "prepare_graph", "tensor_centric", "graph_centric",
           "vertex_centric", "layer", "VertexProgram", "run_saga", "pagerank", "time_call"]

MODELS = ("tensor", "graph", "vertex")  # tensor-centric (PyG), graph-centric (DGL), vertex-centric (SAGA-NN loop)
KINDS = ("gcn", "gat")
NEGATIVE_SLOPE = 0.2  # GAT's LeakyReLU slope (Velickovic et al., ICLR 2018)


@dataclass
class LayerWeights:
    """The parameters of one layer, shared by the three implementations.

    ``weight`` is ``in x (heads * out)``; ``att_src`` / ``att_dst`` (GAT only) are ``heads x out``.
    """

    kind: str
    weight: torch.Tensor
    bias: torch.Tensor
    heads: int = 1
    att_src: torch.Tensor | None = None
    att_dst: torch.Tensor | None = None

    @property
    def out_per_head(self) -> int:
        return self.weight.shape[1] // self.heads


def _check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown layer kind {kind!r}; choose one of {KINDS}")
    return kind


def init_weights(kind: str, in_feats: int, out_feats: int, heads: int = 1, seed: int = 0) -> LayerWeights:
    """Seeded random weights for a ``kind`` layer (``"gcn"`` or ``"gat"``); ``out_feats`` per head.

    Example:
        >>> init_weights("gat", 8, 4, heads=2).weight.shape
        torch.Size([8, 8])
    """
    _check_kind(kind)
    if kind == "gcn" and heads != 1:
        raise ValueError(f"a GCN layer has one head, got heads={heads}")
    if min(in_feats, out_feats, heads) < 1:
        raise ValueError(f"in_feats, out_feats and heads must be >= 1, got {in_feats}, {out_feats}, {heads}")
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(in_feats, heads * out_feats, generator=gen) / in_feats ** 0.5
    bias = 0.1 * torch.randn(heads * out_feats, generator=gen)
    if kind == "gcn":
        return LayerWeights(kind, weight, bias)
    att = [torch.randn(heads, out_feats, generator=gen) / out_feats ** 0.5 for _ in range(2)]
    return LayerWeights(kind, weight, bias, heads, att[0], att[1])


def prepare_graph(graph: dgl.DGLGraph) -> dgl.DGLGraph:
    """The structure every implementation runs on: both directions of every edge, no duplicate
    edges, and exactly one self-loop per node (so no node has zero in-degree, and in-degree equals
    out-degree, which PyG's and DGL's GCN normalisations both need to agree)."""
    src, dst = graph.edges()
    n = graph.num_nodes()
    keep = src != dst
    src, dst = src[keep], dst[keep]
    simple = dgl.to_simple(dgl.graph((torch.cat([src, dst]), torch.cat([dst, src])), num_nodes=n))
    return dgl.add_self_loop(simple)


# ---------------------------------------------------------------- tensor-centric: PyG on edge_index
def tensor_centric(kind: str, graph: dgl.DGLGraph, x: torch.Tensor, w: LayerWeights) -> torch.Tensor:
    """PyG's ``GCNConv`` / ``GATConv`` on ``edge_index = [src; dst]``, loaded with ``w``."""
    from torch_geometric.nn import GATConv, GCNConv  # imported here: PyG is only needed for this model

    edge_index = torch.stack(graph.edges())
    in_feats = x.shape[1]
    if _check_kind(kind) == "gcn":
        conv = GCNConv(in_feats, w.weight.shape[1], add_self_loops=False)  # the graph has its loops
    else:
        conv = GATConv(in_feats, w.out_per_head, heads=w.heads, add_self_loops=False,
                       negative_slope=NEGATIVE_SLOPE, dropout=0.0)
        conv.att_src.data.copy_(w.att_src.unsqueeze(0))
        conv.att_dst.data.copy_(w.att_dst.unsqueeze(0))
    conv.lin.weight.data.copy_(w.weight.T)
    conv.bias.data.copy_(w.bias)
    return conv(x, edge_index)


# ---------------------------------------------------------------- graph-centric: DGL message passing
def graph_centric(kind: str, graph: dgl.DGLGraph, x: torch.Tensor, w: LayerWeights) -> torch.Tensor:
    """The layer as DGL message-passing calls on the whole graph (differentiable: autograd runs
    backward through ``update_all``)."""
    with graph.local_scope():
        if _check_kind(kind) == "gcn":
            # D^-1/2 written out here and in _gcn_program on purpose, not gnnbook.graph.normalisation's: the
            # lesson is the same normalisation expressed in each programming model's own terms (7.1)
            src_norm = graph.out_degrees().float().clamp(min=1).pow(-0.5).unsqueeze(1)
            dst_norm = graph.in_degrees().float().clamp(min=1).pow(-0.5).unsqueeze(1)
            graph.srcdata["h"] = (x @ w.weight) * src_norm  # transform first: out is narrower than in
            graph.update_all(fn.copy_u("h", "m"), fn.sum("m", "h"))
            return graph.dstdata["h"] * dst_norm + w.bias
        z = (x @ w.weight).view(-1, w.heads, w.out_per_head)
        graph.srcdata.update(z=z, el=(z * w.att_src).sum(-1, keepdim=True))
        graph.dstdata["er"] = (z * w.att_dst).sum(-1, keepdim=True)
        graph.apply_edges(fn.u_add_v("el", "er", "e"))
        graph.edata["a"] = edge_softmax(graph, F.leaky_relu(graph.edata.pop("e"), NEGATIVE_SLOPE))
        graph.update_all(fn.u_mul_e("z", "a", "m"), fn.sum("m", "h"))
        return graph.dstdata["h"].reshape(x.shape[0], -1) + w.bias


# ---------------------------------------------------------------- vertex-centric: SAGA-NN in a loop
@dataclass
class VertexProgram:
    """NeuGraph's four stages for one vertex ``v`` (all plain Python functions):

    - ``scatter(u)``: what the edge ``u -> v`` carries from its source's state;
    - ``apply_edge(message, v)``: a per-edge function of the message and the destination;
    - ``gather(values)``: accumulate the edge values of all in-edges of ``v``;
    - ``apply_vertex(v, accumulated)``: the vertex's new state.
    """

    scatter: Callable[[int], Any]
    gather: Callable[[list], Any]
    apply_vertex: Callable[[int, Any], Any]
    apply_edge: Callable[[Any, int], Any] | None = None


def run_saga(indptr: np.ndarray, indices: np.ndarray, program: VertexProgram) -> list:
    """One SAGA round over every vertex, pulling along in-edges (CSC ``indptr``/``indices``)."""
    new_state = []
    for v in range(len(indptr) - 1):
        values = [program.scatter(u) for u in indices[indptr[v]:indptr[v + 1]]]
        if program.apply_edge is not None:
            values = [program.apply_edge(m, v) for m in values]
        new_state.append(program.apply_vertex(v, program.gather(values)))
    return new_state


def _csc(graph: dgl.DGLGraph) -> tuple[np.ndarray, np.ndarray]:
    indptr, indices, _ = graph.adj_tensors("csc")  # in-edges of v: indices[indptr[v]:indptr[v+1]]
    return indptr.numpy(), indices.numpy()


def _gcn_program(x: np.ndarray, deg: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> VertexProgram:
    norm = deg.astype(np.float32) ** -0.5   # the vertex program's own D^-1/2, in numpy (see graph_centric)
    return VertexProgram(
        scatter=lambda u: x[u] * norm[u],  # Scatter: the source's features, scaled by 1/sqrt(deg)
        gather=lambda values: np.sum(values, axis=0),  # Gather: sum over in-edges
        apply_vertex=lambda v, acc: (acc * norm[v]) @ weight + bias)  # ApplyVertex: the dense layer


def _gat_program(x: np.ndarray, w: LayerWeights) -> VertexProgram:
    weight, bias = w.weight.numpy(), w.bias.numpy()
    a_src, a_dst = w.att_src.numpy(), w.att_dst.numpy()
    heads, out = w.heads, w.out_per_head
    # ApplyVertex of the previous round: every vertex's transformed features and attention halves
    z = [(x[v] @ weight).reshape(heads, out) for v in range(x.shape[0])]
    el = [(zv * a_src).sum(-1) for zv in z]
    er = [(zv * a_dst).sum(-1) for zv in z]

    def apply_edge(message, v):  # ApplyEdge: the unnormalised attention score of u -> v, per head
        z_u, el_u = message
        score = el_u + er[v]
        return z_u, np.where(score > 0, score, NEGATIVE_SLOPE * score)

    def gather(values):  # Gather: softmax over the in-edges, then the weighted sum
        scores = np.stack([s for _, s in values])  # edges x heads
        alpha = np.exp(scores - scores.max(axis=0))
        alpha /= alpha.sum(axis=0)
        return sum(a[:, None] * z_u for a, (z_u, _) in zip(alpha, values))

    return VertexProgram(scatter=lambda u: (z[u], el[u]), apply_edge=apply_edge, gather=gather,
                         apply_vertex=lambda v, acc: acc.reshape(-1) + bias)


def vertex_centric(kind: str, graph: dgl.DGLGraph, x: torch.Tensor, w: LayerWeights) -> torch.Tensor:
    """The layer as a SAGA-NN vertex program, run by :func:`run_saga` (forward only)."""
    indptr, indices = _csc(graph)
    xs = x.detach().numpy()
    if _check_kind(kind) == "gcn":
        program = _gcn_program(xs, np.diff(indptr), w.weight.numpy(), w.bias.numpy())
    else:
        program = _gat_program(xs, w)
    return torch.from_numpy(np.stack(run_saga(indptr, indices, program)).astype(np.float32))


_LAYERS = {"tensor": tensor_centric, "graph": graph_centric, "vertex": vertex_centric}


def layer(model: str, kind: str, graph: dgl.DGLGraph, x: torch.Tensor, w: LayerWeights) -> torch.Tensor:
    """A ``kind`` layer (``gcn``/``gat``) in programming ``model`` (``tensor``/``graph``/``vertex``).

    Example:
        >>> layer("matrix", "gcn", None, None, None)
        Traceback (most recent call last):
        ...
        ValueError: unknown programming model 'matrix'; choose one of ('tensor', 'graph', 'vertex')
    """
    if model not in _LAYERS:
        raise ValueError(f"unknown programming model {model!r}; choose one of {MODELS}")
    _check_kind(kind)
    if w.kind != kind:
        raise ValueError(f"weights are for a {w.kind!r} layer, not {kind!r}")
    return _LAYERS[model](kind, graph, x, w)


# ---------------------------------------------------------------- 7.2: PageRank on the same engines
def pagerank(model: str, graph: dgl.DGLGraph, damping: float = 0.85, iterations: int = 30) -> torch.Tensor:
    """PageRank by power iteration, ``r <- (1-d)/N + d * sum_{u->v} r_u / outdeg(u)``, in
    programming ``model``: the same engine as the layers, with one float per vertex instead of a
    feature vector and no weights.  Every node needs an out-edge (:func:`prepare_graph` adds loops).

    Example:
        >>> g = prepare_graph(dgl.graph(([0, 1], [1, 2])))
        >>> round(float(pagerank("graph", g).sum()), 4)
        1.0
    """
    if model not in _LAYERS:
        raise ValueError(f"unknown programming model {model!r}; choose one of {MODELS}")
    if not 0 <= damping < 1:
        raise ValueError(f"damping must be in [0, 1), got {damping}")
    n = graph.num_nodes()
    out_deg = graph.out_degrees().float()
    if bool((out_deg == 0).any()):
        raise ValueError("PageRank here needs an out-edge at every node; pass the graph through prepare_graph")
    rank = torch.full((n,), 1.0 / n)
    if model == "vertex":
        indptr, indices = _csc(graph)
        r, deg = rank.numpy().astype(np.float64), out_deg.numpy().astype(np.float64)
        for _ in range(iterations):
            program = VertexProgram(scatter=lambda u, r=r: r[u] / deg[u], gather=sum,
                                    apply_vertex=lambda v, acc: (1 - damping) / n + damping * acc)
            r = np.array(run_saga(indptr, indices, program))
        return torch.from_numpy(r).float()
    src, dst = graph.edges()
    for _ in range(iterations):
        if model == "tensor":  # gather along edge_index, scatter-add into the destinations
            total = torch.zeros(n).index_add_(0, dst, (rank / out_deg)[src])
        else:
            with graph.local_scope():
                graph.srcdata["r"] = rank / out_deg
                graph.update_all(fn.copy_u("r", "m"), fn.sum("m", "r"))
                total = graph.dstdata["r"]
        rank = (1 - damping) / n + damping * total
    return rank


def time_call(func: Callable[[], Any], repeat: int = 3) -> float:
    """The fastest of ``repeat`` wall-clock runs of ``func()``, in seconds (the least disturbed
    by other load on the machine).

    Example:
        >>> time_call(lambda: sum(range(10)), repeat=2) < 1.0
        True
    """
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - start)
    return best
