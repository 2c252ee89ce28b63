"""Seeded synthetic graphs that need no files: power-law and stochastic block model.

Book: 1.2.1 why GNN training gets large (power-law and community graphs).

Used in: no notebook directly.

Both are a degree-corrected stochastic block model: every node has a class and
a weight; an edge picks its source in proportion to the weight and, with
probability ``homophily``, a destination of the same class (otherwise any
node), again in proportion to the weight.  Power-law weights give a heavy-tailed
degree distribution (hubs, as in social and web graphs); equal weights give a
plain SBM.  Features are a class centroid plus Gaussian noise, so a GNN can
learn the labels and benefits from neighbours.

Example:
    >>> g = synthetic_arrays("powerlaw", num_nodes=1000, avg_degree=10, seed=0)
    >>> g.num_nodes, g.num_edges > 8000
    (1000, True)
"""
from __future__ import annotations

import numpy as np

from .arrays import GraphArrays, random_split

KINDS = ("powerlaw", "sbm")


def _sample_by_weight(rng, cumulative: np.ndarray, count: int, offset=None, span=None) -> np.ndarray:
    """Draw ``count`` indices with probability proportional to weight, via the
    cumulative weights; ``offset``/``span`` restrict each draw to a block."""
    if offset is None:
        return np.searchsorted(cumulative, rng.random(count) * cumulative[-1], side="right")
    lo = np.where(offset > 0, cumulative[offset - 1], 0.0)
    hi = cumulative[offset + span - 1]
    return np.searchsorted(cumulative, lo + rng.random(count) * (hi - lo), side="right")


def synthetic_arrays(
    kind: str = "powerlaw",
    num_nodes: int = 10_000,
    avg_degree: float = 10.0,
    num_classes: int = 8,
    num_features: int = 32,
    homophily: float = 0.8,
    exponent: float = 2.2,
    feature_noise: float = 2.0,
    seed: int = 0,
) -> GraphArrays:
    """Generate a graph of ``num_nodes`` with about ``avg_degree`` edges per node
    (counting both directions).  ``kind`` is ``"powerlaw"`` or ``"sbm"``."""
    if kind not in KINDS:
        raise ValueError(f"unknown synthetic graph kind {kind!r}; choose one of {KINDS}")
    if num_nodes < 2 or avg_degree <= 0:
        raise ValueError("a synthetic graph needs num_nodes >= 2 and avg_degree > 0")
    rng = np.random.default_rng(seed)
    # Nodes are ordered by class, so a class is one contiguous block of ids.
    label = np.sort(rng.integers(0, num_classes, num_nodes))
    if kind == "powerlaw":
        # Chung-Lu weights w_i ~ i^(-1/(exponent-1)) give P(degree = k) ~ k^-exponent.
        weight = (np.arange(1, num_nodes + 1) ** (-1.0 / (exponent - 1.0)))[rng.permutation(num_nodes)]
    else:
        weight = np.ones(num_nodes)
    cumulative = np.cumsum(weight)
    num_draws = int(num_nodes * avg_degree / 2)
    src = _sample_by_weight(rng, cumulative, num_draws)
    same_class = rng.random(num_draws) < homophily
    block_start = np.searchsorted(label, np.arange(num_classes))
    block_size = np.diff(np.append(block_start, num_nodes))
    dst = _sample_by_weight(rng, cumulative, num_draws)
    c = label[src[same_class]]
    dst[same_class] = _sample_by_weight(rng, cumulative, int(same_class.sum()), block_start[c], block_size[c])
    centroids = rng.normal(0.0, 1.0, (num_classes, num_features))
    feat = centroids[label] + rng.normal(0.0, feature_noise, (num_nodes, num_features))
    return GraphArrays.from_undirected(src, dst, feat.astype(np.float32), label, *random_split(num_nodes, seed=seed))
