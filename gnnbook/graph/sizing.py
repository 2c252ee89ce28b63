"""Back-of-the-envelope memory sizing for GNN training: embedding tables,
optimizer state and activations, in bytes (decimal units: 1 GB = 1e9 B).

Book: 1.2.1 why GNN training gets large (memory sizing); 7.7 comparing and choosing.

Used in: chapters/01_introduction.ipynb, chapters/09_outlook.ipynb, labs/lab10_recommendation.ipynb.

What is counted, so that a number can be checked against a measurement:

- an embedding table or weight matrix is ``rows * dims * bytes_per_value``;
- training it adds a gradient of the same size (dense gradients) and the
  optimizer's per-parameter state: Adam keeps two moments (``m`` and ``v``),
  so weights + gradient + state = 4x the weights (3x more than the weights
  alone); SGD with momentum keeps one, plain SGD none;
- activations, the textbook count: one ``hidden``-wide vector per node per
  layer, plus one score per edge per head per layer for attention models;
- a GCN in training keeps more than the textbook count, because autograd saves
  what each backward step needs (see :func:`gcn_training_activation_bytes`).

Example:
    >>> format_bytes(embedding_table_bytes(10**8, 128))
    '51.2 GB'
    >>> training_state_bytes(embedding_table_bytes(10**8, 128), "adam")["total"] / 1e9
    204.8
"""
from __future__ import annotations

import math

__all__ = [
    "OPTIMIZER_STATE_COPIES",
    "embedding_table_bytes",
    "training_state_bytes",
    "activation_bytes",
    "gcn_training_activation_bytes",
    "format_bytes",
]

# Per-parameter state tensors, each the size of the parameter.
OPTIMIZER_STATE_COPIES: dict[str, int] = {
    "sgd": 0,
    "sgd-momentum": 1,  # velocity
    "adagrad": 1,  # sum of squared gradients
    "rmsprop": 1,  # running mean of squared gradients
    "adam": 2,  # first and second moments (Kingma & Ba, 2015)
    "adamw": 2,
}


def _check_count(name: str, value: float) -> None:
    if value < 0 or (isinstance(value, float) and math.isnan(value)):
        raise ValueError(f"{name} must be >= 0, got {value}")


def embedding_table_bytes(num_ids: int, dim: int, bytes_per_value: int = 4) -> int:
    """Bytes of a dense ``num_ids x dim`` table (fp32 = 4 bytes, fp16/bf16 = 2).

    Example:
        >>> embedding_table_bytes(10**8, 128)   # 1e8 ids x 128 dims x 4 B
        51200000000
    """
    for name, value in (("num_ids", num_ids), ("dim", dim), ("bytes_per_value", bytes_per_value)):
        _check_count(name, value)
    return int(num_ids) * int(dim) * int(bytes_per_value)


def training_state_bytes(param_bytes: int, optimizer: str = "adam", dense_gradient: bool = True) -> dict[str, int]:
    """Memory of parameters during training, itemised: ``weights``,
    ``gradient`` (same size when gradients are dense, 0 for sparse updates
    that touch only a batch of rows), ``optimizer_state`` and ``total``.

    Example:
        >>> training_state_bytes(100, "adam")
        {'weights': 100, 'gradient': 100, 'optimizer_state': 200, 'total': 400}
    """
    _check_count("param_bytes", param_bytes)
    key = optimizer.lower()
    if key not in OPTIMIZER_STATE_COPIES:
        raise ValueError(f"unknown optimizer {optimizer!r}; known: {', '.join(OPTIMIZER_STATE_COPIES)}")
    items = {
        "weights": int(param_bytes),
        "gradient": int(param_bytes) if dense_gradient else 0,
        "optimizer_state": OPTIMIZER_STATE_COPIES[key] * int(param_bytes),
    }
    items["total"] = sum(items.values())
    return items


def activation_bytes(num_nodes: int, hidden: int, num_layers: int, bytes_per_value: int = 4,
                     num_edges: int = 0, heads: int = 1, tensors_per_layer: float = 1.0) -> int:
    """Textbook activation memory of an ``num_layers``-layer full-graph GNN:
    ``nodes * hidden * layers * bytes * tensors_per_layer``, plus
    ``edges * heads * layers * bytes`` attention scores when ``num_edges`` is
    given (GAT).  ``tensors_per_layer=1`` counts each layer's output once.

    Example:
        >>> activation_bytes(1000, 16, 2)
        128000
        >>> activation_bytes(1000, 16, 2, num_edges=10_000, heads=8)  # + attention scores
        768000
    """
    for name, value in (("num_nodes", num_nodes), ("hidden", hidden), ("num_layers", num_layers),
                        ("num_edges", num_edges), ("heads", heads), ("tensors_per_layer", tensors_per_layer)):
        _check_count(name, value)
    node_part = num_nodes * hidden * num_layers * bytes_per_value * tensors_per_layer
    edge_part = num_edges * heads * num_layers * bytes_per_value
    return int(round(node_part + edge_part))


def gcn_training_activation_bytes(num_nodes: int, in_feats: int, hidden: int, num_classes: int,
                                  num_layers: int, dropout: bool = True,
                                  bytes_per_value: int = 4) -> dict[str, int]:
    """Peak memory of one full-graph forward + backward of :class:`gnnbook.models.GCN`
    beyond the graph, features and weights, itemised by what autograd keeps:

    - ``saved_input``: the first layer's dropped-out input features (``in_feats``
      wide, kept for the first weight's gradient; absent without dropout, when
      the saved tensor is the feature matrix itself);
    - ``saved_hidden``: per later layer, the ReLU output, the dropout mask
      (stored as floats) and the input of the weight multiplication, each
      ``hidden`` wide (two without dropout);
    - ``working_set``: at the start of backward, the output and its gradient
      (``num_classes`` wide) plus the gradient entering and leaving a layer
      (``hidden`` wide; ``num_classes`` wide for a one-layer GCN).

    Per-node degree norms (one float) are ignored.  Not counted: temporaries
    inside a backward step (e.g. a gradient times the degree norm), so the
    measured peak is usually a bit above this.

    Example:
        >>> items = gcn_training_activation_bytes(1000, 16, 16, 16, 2)
        >>> items["total"], items["textbook"]
        (512000, 128000)
    """
    for name, value in (("num_nodes", num_nodes), ("in_feats", in_feats), ("hidden", hidden),
                        ("num_classes", num_classes)):
        _check_count(name, value)
    if num_layers < 1:
        raise ValueError(f"num_layers must be >= 1, got {num_layers}")
    per_node = bytes_per_value * num_nodes
    items = {
        "saved_input": per_node * in_feats if dropout else 0,
        "saved_hidden": per_node * hidden * (3 if dropout else 2) * (num_layers - 1),
        "working_set": per_node * (2 * num_classes + 2 * (hidden if num_layers > 1 else num_classes)),
    }
    items["total"] = sum(items.values())
    items["textbook"] = activation_bytes(num_nodes, hidden, num_layers, bytes_per_value)
    return items


def format_bytes(num_bytes: float) -> str:
    """Decimal units, three significant digits.

    Example:
        >>> format_bytes(51_200_000_000), format_bytes(1536)
        ('51.2 GB', '1.54 kB')
    """
    value = float(num_bytes)
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if abs(value) < 1000 or unit == "PB":
            return f"{value:.3g} {unit}"
        value /= 1000
    raise AssertionError("unreachable")
