"""GNN models on DGL: GCN, GAT, GraphSAGE, GIN, GGNN and VGAE.

Book: 2.3 typical GNN models (GGNN 2.3.1, GCN 2.3.2, GAT 2.3.3, VGAE 2.3.4); 8.2 DGL models.

Used in: chapters/01_introduction.ipynb, chapters/02_gnn_models.ipynb,
chapters/04_gnn_training.ipynb, chapters/05g_historical_embeddings.ipynb,
chapters/08_dgl_practice.ipynb, chapters/09_outlook.ipynb, labs/lab05b_historical_embeddings.ipynb.

Every node classifier has the same interface, ``model(graph_or_blocks, feat)``:
pass a whole graph for full-graph training or a list of message-flow blocks
(one per layer, from a DGL sampler) for minibatch training.

Example:
    >>> model = build_model("gcn", in_feats=1433, num_classes=7)
    >>> sum(p.numel() for p in model.parameters())
    23063
"""
from __future__ import annotations

import warnings
from typing import Any

import dgl
import dgl.nn as dglnn
import torch
import torch.nn as nn
import torch.nn.functional as F

# Sparse CSR autograd works in torch 2.2 but warns that it is "beta" on every use.
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")

# Architecture hyper-parameters from the papers (optimiser settings: gnnbook.training.train).
MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "gcn": dict(hidden=16, num_layers=2, dropout=0.5),  # Kipf & Welling 2017
    "gat": dict(hidden=8, num_layers=2, heads=8, dropout=0.6),  # Velickovic et al. 2018
    "sage": dict(hidden=64, num_layers=2, dropout=0.5),  # Hamilton et al. 2017, mean aggregator
    "gin": dict(hidden=64, num_layers=2, dropout=0.5),  # Xu et al. 2019
    "ggnn": dict(hidden=64, num_layers=1, steps=3, dropout=0.5),  # Li et al. 2016
}


def _layer_graphs(graph_or_blocks, num_layers: int) -> list:
    if isinstance(graph_or_blocks, (list, tuple)):
        if len(graph_or_blocks) != num_layers:
            raise ValueError(f"model has {num_layers} layers but got {len(graph_or_blocks)} blocks")
        return list(graph_or_blocks)
    return [graph_or_blocks] * num_layers


class _Stack(nn.Module):
    """Layers applied in turn with dropout before each and ``act`` between them."""

    def __init__(self, layers: list[nn.Module], dropout: float, act=F.relu, input_dropout: bool = True):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.dropout = nn.Dropout(dropout)
        self.act = act
        self.input_dropout = input_dropout  # False: dropout between layers only (DGL's examples)

    def forward(self, graph_or_blocks, feat: torch.Tensor, skip_first_dropout: bool = False) -> torch.Tensor:
        h = feat
        skip_first = skip_first_dropout or not self.input_dropout
        for i, (layer, g) in enumerate(zip(self.layers, _layer_graphs(graph_or_blocks, len(self.layers)))):
            h = self.conv(layer, g, h if (i == 0 and skip_first) else self.dropout(h))
            if i < len(self.layers) - 1:
                h = self.act(h)
        return h

    def conv(self, layer: nn.Module, g, h: torch.Tensor) -> torch.Tensor:
        return layer(g, h)


class InputLinear(nn.Module):
    """``dropout(x) @ weight`` for dense or sparse ``x``.

    Bag-of-words features are ~99% zeros; dropout only changes the non-zeros,
    so on a sparse ``x`` we drop its stored values and multiply sparse x dense.
    Same distribution as dense dropout, and ~15x faster on CiteSeer here,
    because a dense 3327 x 3703 mask costs more than the whole GCN.
    """

    def __init__(self, in_feats: int, out_feats: int, dropout: float, gain: float = 1.0):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(in_feats, out_feats))
        nn.init.xavier_uniform_(self.weight, gain=gain)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.layout == torch.sparse_csr:
            values = F.dropout(x.values(), self.dropout, self.training)
            x = torch.sparse_csr_tensor(x.crow_indices(), x.col_indices(), values, x.shape)
            return x @ self.weight
        return F.dropout(x, self.dropout, self.training) @ self.weight


class GCN(_Stack):
    r"""Graph convolutional network (Kipf & Welling, ICLR 2017), book 2.3.2.  Each layer is

    .. math:: H^{(l+1)} = \sigma\left(\hat D^{-1/2} \hat A \hat D^{-1/2} H^{(l)} W^{(l)} + b^{(l)}\right),
        \quad \hat A = A + I

    (the graph must carry its self-loops: ``gnnbook.training.train.prepare_graph``), with ReLU between
    layers and dropout before each.  The first layer's ``H W`` is an :class:`InputLinear`, so that sparse
    input features stay sparse.

    Args:
        in_feats: input feature size.
        num_classes: output size (one logit per class).
        hidden: hidden size (default 16, the paper's).
        num_layers: number of graph convolutions (default 2).
        dropout: dropout before each layer (default 0.5).

    Shapes:
        - input: a graph of N nodes (or a list of ``num_layers`` blocks) and features ``(N, in_feats)``,
          dense or sparse CSR.
        - output: logits ``(N, num_classes)`` (blocks: one row per output node of the last block).
    """

    accepts_sparse_input = True

    def __init__(self, in_feats: int, num_classes: int, hidden: int = 16, num_layers: int = 2, dropout: float = 0.5):
        dims = [in_feats] + [hidden] * (num_layers - 1) + [num_classes]
        first = dglnn.GraphConv(dims[1], dims[1], weight=False, allow_zero_in_degree=True)
        rest = [dglnn.GraphConv(a, b, allow_zero_in_degree=True) for a, b in zip(dims[1:], dims[2:])]
        super().__init__([first] + rest, dropout)
        self.input = InputLinear(in_feats, dims[1], dropout)

    def forward(self, graph_or_blocks, feat: torch.Tensor) -> torch.Tensor:
        return super().forward(graph_or_blocks, self.input(feat), skip_first_dropout=True)


class GraphSAGE(_Stack):
    r"""GraphSAGE (Hamilton et al., NeurIPS 2017), book 4.1.2 and chapter 8's trainer.  Each layer, with the
    mean aggregator the course uses, is DGL's ``SAGEConv``:

    .. math:: h_v' = W_{self} h_v + W_{neigh} \frac{1}{|N(v)|} \sum_{u \in N(v)} h_u + b

    with ReLU between layers and dropout before each.

    Args:
        in_feats: input feature size.
        num_classes: output size.
        hidden: hidden size (default 64).
        num_layers: number of layers (default 2).
        dropout: dropout rate (default 0.5).
        aggregator: DGL's aggregator type (default ``"mean"``; ``"gcn"``, ``"pool"``, ``"lstm"`` exist).
        input_dropout: dropout on the input features too (default True); False drops out between layers
            only, as DGL's distributed example does (its input rows are many).

    Shapes:
        - input: a graph of N nodes (or a list of blocks) and features ``(N, in_feats)``.
        - output: logits ``(N, num_classes)``.
    """

    def __init__(self, in_feats: int, num_classes: int, hidden: int = 64, num_layers: int = 2,
                 dropout: float = 0.5, aggregator: str = "mean", input_dropout: bool = True):
        dims = [in_feats] + [hidden] * (num_layers - 1) + [num_classes]
        super().__init__([dglnn.SAGEConv(a, b, aggregator) for a, b in zip(dims, dims[1:])], dropout,
                         input_dropout=input_dropout)


class GIN(_Stack):
    r"""Graph isomorphism network (Xu et al., ICLR 2019).  Each layer is DGL's ``GINConv`` with a learnt
    :math:`\epsilon` and a two-layer MLP:

    .. math:: h_v' = \mathrm{MLP}\left((1 + \epsilon) h_v + \sum_{u \in N(v)} h_u\right)

    with ReLU between layers and dropout before each.

    Args:
        in_feats: input feature size.
        num_classes: output size.
        hidden: hidden size, also inside each MLP (default 64).
        num_layers: number of layers (default 2).
        dropout: dropout rate (default 0.5).

    Shapes:
        - input: a graph of N nodes (or a list of blocks) and features ``(N, in_feats)``.
        - output: logits ``(N, num_classes)``.
    """

    def __init__(self, in_feats: int, num_classes: int, hidden: int = 64, num_layers: int = 2, dropout: float = 0.5):
        dims = [in_feats] + [hidden] * (num_layers - 1) + [num_classes]
        layers = [
            dglnn.GINConv(nn.Sequential(nn.Linear(a, hidden), nn.ReLU(), nn.Linear(hidden, b)), "sum", learn_eps=True)
            for a, b in zip(dims, dims[1:])
        ]
        super().__init__(layers, dropout)


class GAT(_Stack):
    r"""Graph attention network (Velickovic et al., ICLR 2018), book 2.3.3.  Each head of each layer is

    .. math:: h_v' = \sum_{u \in N(v)} \alpha_{vu} W h_u, \quad
        \alpha_{vu} = \mathrm{softmax}_u\left(\mathrm{LeakyReLU}_{0.2}(a^\top [W h_v \| W h_u])\right)

    (DGL's ``GATConv``); heads are concatenated in hidden layers, after ELU, and averaged in the last
    (one head).  The first layer's projection is an :class:`InputLinear` (sparse-aware).

    Args:
        in_feats: input feature size.
        num_classes: output size.
        hidden: size of each head in the hidden layers (default 8).
        num_layers: number of layers (default 2).
        heads: heads of each hidden layer (default 8).
        dropout: dropout on the inputs of each layer and on the attention weights (default 0.6).

    Shapes:
        - input: a graph of N nodes (or a list of blocks) and features ``(N, in_feats)``, dense or sparse CSR.
        - output: logits ``(N, num_classes)``.
    """

    accepts_sparse_input = True

    def __init__(self, in_feats: int, num_classes: int, hidden: int = 8, num_layers: int = 2,
                 heads: int = 8, dropout: float = 0.6):
        layers = []
        dim = in_feats
        for i in range(num_layers):
            last = i == num_layers - 1
            out, n_heads = (num_classes, 1) if last else (hidden, heads)
            layers.append(dglnn.GATConv(dim, out, n_heads, feat_drop=0.0, attn_drop=dropout,
                                        negative_slope=0.2, allow_zero_in_degree=True))
            dim = out * n_heads
        super().__init__(layers, dropout, act=F.elu)
        first = self.layers[0]
        self.input = InputLinear(in_feats, first.fc.out_features, dropout, gain=nn.init.calculate_gain("relu"))
        first.fc = nn.Identity()  # its projection is self.input

    def forward(self, graph_or_blocks, feat: torch.Tensor) -> torch.Tensor:
        return super().forward(graph_or_blocks, self.input(feat), skip_first_dropout=True)

    def conv(self, layer, g, h):
        out = layer(g, h)  # (nodes, heads, dim)
        return out.flatten(1) if layer is not self.layers[-1] else out.mean(1)


class GGNN(nn.Module):
    r"""Gated graph sequence network (Li et al., ICLR 2016), book 2.3.1: a linear projection into the node
    state, then ``steps`` rounds of DGL's ``GatedGraphConv`` per layer, a GRU that updates each node's state
    from the sum of its neighbours' messages,

    .. math:: m_v = \sum_{u \in N(v)} W h_u, \quad h_v' = \mathrm{GRU}(m_v, h_v),

    and a linear classifier.  Full-graph only: the state is shared across the rounds.

    Args:
        in_feats: input feature size.
        num_classes: output size.
        hidden: state size (default 64).
        num_layers: GatedGraphConv layers (default 1).
        steps: rounds of each layer (default 3).
        dropout: dropout on the input and before the classifier (default 0.5).

    Shapes:
        - input: a graph of N nodes and features ``(N, in_feats)``.
        - output: logits ``(N, num_classes)``.
    """

    def __init__(self, in_feats: int, num_classes: int, hidden: int = 64, num_layers: int = 1,
                 steps: int = 3, dropout: float = 0.5):
        super().__init__()
        self.project = nn.Linear(in_feats, hidden)
        self.gated = nn.ModuleList(dglnn.GatedGraphConv(hidden, hidden, steps, 1) for _ in range(num_layers))
        self.classify = nn.Linear(hidden, num_classes)
        self.dropout = nn.Dropout(dropout)

    def forward(self, graph_or_blocks, feat: torch.Tensor) -> torch.Tensor:
        if isinstance(graph_or_blocks, (list, tuple)):
            raise ValueError("GGNN shares its state across steps; train it full-graph")
        h = torch.relu(self.project(self.dropout(feat)))
        for layer in self.gated:
            h = layer(graph_or_blocks, h)
        return self.classify(self.dropout(h))


class VGAE(nn.Module):
    r"""Variational graph auto-encoder (Kipf & Welling, 2016), book 2.3.4: a two-layer GCN encoder gives each
    node a Gaussian embedding :math:`z_v \sim \mathcal N(\mu_v, \sigma_v^2)` (its mean when evaluating); an
    edge's logit is the inner product :math:`z_u^\top z_v` (:meth:`score`).

    Args:
        in_feats: input feature size.
        hidden: the first GCN layer's size (default 32).
        latent: the embedding size (default 16).

    Shapes:
        - :meth:`encode`: a graph of N nodes and features ``(N, in_feats)`` -> ``z``, ``mean``, ``log_std``,
          each ``(N, latent)``.
        - :meth:`score`: embeddings ``(N, latent)`` and E source and destination ids -> logits ``(E,)``.
    """

    accepts_sparse_input = True

    def __init__(self, in_feats: int, hidden: int = 32, latent: int = 16):
        super().__init__()
        self.input = InputLinear(in_feats, hidden, dropout=0.0)  # the first GCN layer's X W
        self.base = dglnn.GraphConv(hidden, hidden, weight=False, activation=F.relu, allow_zero_in_degree=True)
        self.mean = dglnn.GraphConv(hidden, latent, allow_zero_in_degree=True)
        self.log_std = dglnn.GraphConv(hidden, latent, allow_zero_in_degree=True)

    def encode(self, g: dgl.DGLGraph, feat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.base(g, self.input(feat))
        mean, log_std = self.mean(g, h), self.log_std(g, h).clamp(max=10)
        z = mean + torch.randn_like(mean) * log_std.exp() if self.training else mean
        return z, mean, log_std

    @staticmethod
    def score(z: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """Edge logits: the inner product of the two endpoints' embeddings."""
        return (z[src] * z[dst]).sum(-1)


_NODE_CLASSIFIERS = {"gcn": GCN, "gat": GAT, "sage": GraphSAGE, "gin": GIN, "ggnn": GGNN}


def build_model(name: str, in_feats: int, num_classes: int, **overrides: Any) -> nn.Module:
    """Build a node classifier by name with the paper's defaults, e.g.
    ``build_model("gat", 1433, 7, heads=4)``."""
    key = name.lower()
    if key not in _NODE_CLASSIFIERS:
        raise ValueError(f"unknown model '{name}'; known models: {', '.join(_NODE_CLASSIFIERS)}")
    return _NODE_CLASSIFIERS[key](in_feats, num_classes, **{**MODEL_DEFAULTS[key], **overrides})
