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
    """Graph convolutional network (Kipf & Welling, ICLR 2017):
    ``H' = D^-1/2 (A + I) D^-1/2 H W``.  The first layer's ``H W`` is done by
    :class:`InputLinear` so that sparse input features stay sparse."""

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
    """GraphSAGE with mean aggregation (Hamilton et al., NeurIPS 2017).  ``input_dropout=False``
    drops out between layers only, as DGL's distributed example does (its input rows are many)."""

    def __init__(self, in_feats: int, num_classes: int, hidden: int = 64, num_layers: int = 2,
                 dropout: float = 0.5, aggregator: str = "mean", input_dropout: bool = True):
        dims = [in_feats] + [hidden] * (num_layers - 1) + [num_classes]
        super().__init__([dglnn.SAGEConv(a, b, aggregator) for a, b in zip(dims, dims[1:])], dropout,
                         input_dropout=input_dropout)


class GIN(_Stack):
    """Graph isomorphism network (Xu et al., ICLR 2019): sum aggregation + MLP."""

    def __init__(self, in_feats: int, num_classes: int, hidden: int = 64, num_layers: int = 2, dropout: float = 0.5):
        dims = [in_feats] + [hidden] * (num_layers - 1) + [num_classes]
        layers = [
            dglnn.GINConv(nn.Sequential(nn.Linear(a, hidden), nn.ReLU(), nn.Linear(hidden, b)), "sum", learn_eps=True)
            for a, b in zip(dims, dims[1:])
        ]
        super().__init__(layers, dropout)


class GAT(_Stack):
    """Graph attention network (Velickovic et al., ICLR 2018): multi-head
    attention, heads concatenated in hidden layers and averaged in the last.
    The first layer's projection is an :class:`InputLinear` (sparse-aware)."""

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
    """Gated graph sequence network (Li et al., ICLR 2016): a GRU updates each
    node's state from its neighbours' messages for ``steps`` rounds."""

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
    """Variational graph auto-encoder (Kipf & Welling, 2016): a GCN encoder
    gives each node a Gaussian embedding; an inner product scores edges."""

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
