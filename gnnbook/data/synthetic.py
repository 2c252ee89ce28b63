"""Seeded synthetic graphs that need no files: power-law, stochastic block model, and a scale graph.

Book: 1.2.1 why GNN training gets large (power-law and community graphs); 8.3.4 cluster
training (``scale``: a graph bigger than one machine's memory budget).

Used in: chapters/08b_beyond_one_machine.ipynb, chapters/09_outlook.ipynb.

Both are a degree-corrected stochastic block model: every node has a class and
a weight; an edge picks its source in proportion to the weight and, with
probability ``homophily``, a destination of the same class (otherwise any
node), again in proportion to the weight.  Power-law weights give a heavy-tailed
degree distribution (hubs, as in social and web graphs); equal weights give a
plain SBM.  Features are a class centroid plus Gaussian noise, so a GNN can
learn the labels and benefits from neighbours.

``scale`` is the power-law model built for millions of nodes (:func:`scale_arrays`):
its size is known before it is built (:func:`scale_graph_bytes`), edges are drawn in
fixed chunks from seeded streams and kept once as sorted pair keys (no symmetrised
sparse-matrix copies), duplicates and self-loops are removed in place, and features are
written chunk by chunk into the one array that holds them.

Example:
    >>> g = synthetic_arrays("powerlaw", num_nodes=1000, avg_degree=10, seed=0)
    >>> g.num_nodes, 7000 < g.num_edges <= 10_000  # repeated draws of a pair are one edge
    (1000, True)
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
from tqdm.auto import tqdm

from .arrays import GraphArrays, random_split

KINDS = ("powerlaw", "sbm", "scale")
SCALE_CHUNK = 1 << 20  # edge draws per seeded stream: part of the graph's definition
FEATURE_CHUNK_BYTES = 16 << 20  # features written per seeded stream (also part of the definition)


def _sample_by_weight(rng, cumulative: np.ndarray, count: int, offset=None, span=None) -> np.ndarray:
    """Draw ``count`` indices with probability proportional to weight, via the
    cumulative weights; ``offset``/``span`` restrict each draw to a block."""
    if offset is None:
        return np.searchsorted(cumulative, rng.random(count) * cumulative[-1], side="right")
    lo = np.where(offset > 0, cumulative[offset - 1], 0.0)
    hi = cumulative[offset + span - 1]
    return np.searchsorted(cumulative, lo + rng.random(count) * (hi - lo), side="right")



@dataclass(frozen=True)
class _Communities:
    """Nodes ordered by class (a class is one contiguous block of ids) and their cumulative weights."""

    label: np.ndarray
    cumulative: np.ndarray
    block_start: np.ndarray
    block_size: np.ndarray

    @classmethod
    def draw(cls, rng, num_nodes: int, num_classes: int, exponent: float | None) -> "_Communities":
        """``exponent`` None: equal weights (a plain SBM)."""
        label = np.sort(rng.integers(0, num_classes, num_nodes))
        if exponent is None:
            weight = np.ones(num_nodes)
        else:
            # Chung-Lu weights w_i ~ i^(-1/(exponent-1)) give P(degree = k) ~ k^-exponent.
            weight = (np.arange(1, num_nodes + 1) ** (-1.0 / (exponent - 1.0)))[rng.permutation(num_nodes)]
        block_start = np.searchsorted(label, np.arange(num_classes))
        return cls(label, np.cumsum(weight), block_start, np.diff(np.append(block_start, num_nodes)))

    def pairs(self, rng, count: int, homophily: float) -> tuple[np.ndarray, np.ndarray]:
        """``count`` edges: sources by weight; destinations by weight, within the source's class
        with probability ``homophily``."""
        src = _sample_by_weight(rng, self.cumulative, count)
        same_class = rng.random(count) < homophily
        dst = _sample_by_weight(rng, self.cumulative, count)
        c = self.label[src[same_class]]
        dst[same_class] = _sample_by_weight(rng, self.cumulative, int(same_class.sum()), self.block_start[c],
                                            self.block_size[c])
        return src, dst


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
    (counting both directions).  ``kind`` is ``"powerlaw"`` or ``"sbm"``.

    More than 8 parameters: each is one property of the generated graph and a load_dataset option that names its
    cache entry.
    """
    if kind == "scale":
        raise ValueError("the scale graph has options of its own: call scale_arrays (or load_arrays('scale', ...))")
    if kind not in KINDS:
        raise ValueError(f"unknown synthetic graph kind {kind!r}; choose one of {KINDS}")
    if num_nodes < 2 or avg_degree <= 0:
        raise ValueError("a synthetic graph needs num_nodes >= 2 and avg_degree > 0")
    rng = np.random.default_rng(seed)
    nodes = _Communities.draw(rng, num_nodes, num_classes, exponent if kind == "powerlaw" else None)
    src, dst = nodes.pairs(rng, int(num_nodes * avg_degree / 2), homophily)
    centroids = rng.normal(0.0, 1.0, (num_classes, num_features))
    feat = centroids[nodes.label] + rng.normal(0.0, feature_noise, (num_nodes, num_features))
    return GraphArrays.from_undirected(src, dst, feat.astype(np.float32), nodes.label,
                                       *random_split(num_nodes, seed=seed))


@dataclass(frozen=True)
class GraphBytes:
    """What a graph takes in memory, by part (bytes), for the edges drawn: an upper bound, since
    repeated draws of a pair become one edge."""

    num_nodes: int
    num_edges: int  # directed: every undirected edge counted twice
    structure: int  # src and dst, int64
    features: int  # float32
    node_data: int  # label (int64) and three boolean masks

    @property
    def total(self) -> int:
        return self.structure + self.features + self.node_data

    def __str__(self) -> str:
        mib = 1 << 20
        return (f"{self.num_nodes:,} nodes, at most {self.num_edges:,} directed edges: structure "
                f"{self.structure / mib:,.0f} MiB + features {self.features / mib:,.0f} MiB + labels and masks "
                f"{self.node_data / mib:,.0f} MiB = {self.total / mib:,.0f} MiB")


def scale_graph_bytes(num_nodes: int, avg_degree: float = 20.0, num_features: int = 64) -> GraphBytes:
    """The size of :func:`scale_arrays`' graph before it is built, at most: pairs drawn twice (around
    hubs and inside classes; 18% of the draws at 200k nodes and degree 20) become one edge.

    Example:
        >>> print(scale_graph_bytes(1_000_000, avg_degree=20, num_features=64))
        1,000,000 nodes, at most 20,000,000 directed edges: structure 305 MiB + features 244 MiB + labels and masks 10 MiB = 560 MiB
    """
    num_edges = 2 * int(num_nodes * avg_degree / 2)
    return GraphBytes(num_nodes, num_edges, 16 * num_edges, 4 * num_nodes * num_features, 11 * num_nodes)


def _compact_unique(keys: np.ndarray, num_nodes: int) -> int:
    """Move the distinct non-self-loop values of sorted ``keys`` to its front, chunk by chunk
    (the write position never passes the read position); return how many there are."""
    written = 0
    for start in range(0, len(keys), SCALE_CHUNK):
        chunk = keys[start:start + SCALE_CHUNK]
        keep = np.ones(len(chunk), dtype=bool)
        keep[1:] = chunk[1:] != chunk[:-1]
        if start:
            keep[0] = chunk[0] != keys[start - 1]
        keep &= chunk // num_nodes != chunk % num_nodes  # a self-loop: lo == hi
        kept = chunk[keep]  # a copy of one chunk: safe to write over the front
        keys[written:written + len(kept)] = kept
        written += len(kept)
    return written


def scale_arrays(
    num_nodes: int = 1_000_000,
    avg_degree: float = 20.0,
    num_classes: int = 16,
    num_features: int = 64,
    homophily: float = 0.8,
    exponent: float = 2.2,
    feature_noise: float = 8.0,
    train_fraction: float = 0.1,
    val_fraction: float = 0.05,
    test_fraction: float = 0.05,
    seed: int = 0,
) -> GraphArrays:
    """A power-law community graph of ``num_nodes`` (the model of :func:`synthetic_arrays`),
    built for millions of nodes: its size is printed first, generation shows a progress bar, and
    memory peaks at the output plus a quarter of its edge arrays.  Training, validation and test
    take ``train_fraction``, ``val_fraction`` and ``test_fraction`` of the nodes (the rest is
    unlabelled), so that an epoch and its evaluation over a million-node graph stay short.  The
    features are noisy (``feature_noise`` 8 against class means 11 apart): the nearest class mean
    of a node's own features finds 21% of the labels (16 classes, 30k nodes, degree 10), of the
    mean over it and its neighbours 44%, so a GNN has work to do.

    Example:
        >>> g = scale_arrays(20_000, avg_degree=10, seed=0)  # prints its size on stderr first
        >>> g.num_nodes, 150_000 < g.num_edges <= 200_000
        (20000, True)

    More than 8 parameters: each is one property of the generated graph and a load_dataset option that names its
    cache entry.
    """
    if num_nodes < 2 or avg_degree <= 0 or num_classes < 1 or num_features < 1:
        raise ValueError("a scale graph needs num_nodes >= 2, avg_degree > 0, num_classes >= 1, num_features >= 1")
    if num_nodes > 3_000_000_000:
        raise ValueError("num_nodes above 3e9 would overflow the int64 pair keys")
    if not (train_fraction > 0 and val_fraction >= 0 and test_fraction > 0
            and train_fraction + val_fraction + test_fraction <= 1):
        raise ValueError("train_fraction and test_fraction > 0, val_fraction >= 0, their sum at most 1, please")
    size = scale_graph_bytes(num_nodes, avg_degree, num_features)
    print(f"scale graph: {size}", file=sys.stderr, flush=True)  # stderr: stdout may be a --json report
    rng = np.random.default_rng(seed)
    nodes = _Communities.draw(rng, num_nodes, num_classes, exponent)
    label = nodes.label
    num_pairs = size.num_edges // 2
    bar = tqdm(total=num_pairs + num_nodes, desc="scale graph", unit="item", unit_scale=True,
               disable=num_pairs < 4 * SCALE_CHUNK, leave=False)
    # Undirected pairs as lo * N + hi: one int64 per edge, sortable in place.
    keys = np.empty(num_pairs, dtype=np.int64)
    for chunk, start in enumerate(range(0, num_pairs, SCALE_CHUNK)):
        count = min(SCALE_CHUNK, num_pairs - start)
        u, v = nodes.pairs(np.random.default_rng([seed, 1, chunk]), count, homophily)
        keys[start:start + count] = np.minimum(u, v) * num_nodes + np.maximum(u, v)
        bar.update(count)
    del nodes  # the cumulative weights: not needed past the draws
    keys.sort()
    unique = _compact_unique(keys, num_nodes)
    src = np.empty(2 * unique, dtype=np.int64)
    dst = np.empty(2 * unique, dtype=np.int64)
    for start in range(0, unique, SCALE_CHUNK):
        pair = keys[start:min(start + SCALE_CHUNK, unique)]
        end = start + len(pair)
        src[start:end], dst[start:end] = np.divmod(pair, num_nodes)
        src[unique + start:unique + end], dst[unique + start:unique + end] = dst[start:end], src[start:end]
    del keys
    centroids = rng.normal(0.0, 1.0, (num_classes, num_features)).astype(np.float32)
    feat = np.empty((num_nodes, num_features), dtype=np.float32)
    rows_per_chunk = max(1, FEATURE_CHUNK_BYTES // (4 * num_features))
    for chunk, start in enumerate(range(0, num_nodes, rows_per_chunk)):
        rows = slice(start, min(start + rows_per_chunk, num_nodes))
        np.random.default_rng([seed, 2, chunk]).standard_normal(out=feat[rows], dtype=np.float32)
        feat[rows] *= np.float32(feature_noise)
        feat[rows] += centroids[label[rows]]
        bar.update(rows.stop - start)
    bar.close()
    masks = random_split(num_nodes, (train_fraction, val_fraction, test_fraction), seed=seed)
    return GraphArrays(src=src, dst=dst, feat=feat, label=label.astype(np.int64), train_mask=masks[0],
                       val_mask=masks[1], test_mask=masks[2])
