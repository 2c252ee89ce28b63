"""Receptive fields: how many nodes an L-layer GNN touches to compute the
outputs of a batch of seed nodes, with the full neighbourhood or with
neighbour sampling.

Book: 1.2.1 why GNN training gets large (neighbour explosion); 4.2 GNNs vs DNNs.

Used in: chapters/01_introduction.ipynb.

Messages flow along edges ``src -> dst``, so the nodes that influence a seed
after ``h`` layers are the nodes with a path of at most ``h`` edges *into* it.
Every count below is the number of distinct nodes, the seeds included, that a
layer-``h`` computation needs: hop 0 is the seeds themselves.

With sampling (as in GraphSAGE and DGL's ``NeighborSampler``) every node of
hop ``h - 1`` keeps itself and draws at most ``f_h`` in-neighbours, so

    |hop h| <= |hop h - 1| * (1 + f_h) <= batch * prod(1 + f_i)

which is ``~ batch * prod(f_i)`` for fanouts well above one; the count stays
close to the bound while fanouts are below the typical degree and the sampled
set is a small part of the graph, and it saturates at the seeds' connected
component.

Example:
    >>> import dgl, torch
    >>> ring = dgl.graph((torch.arange(10), (torch.arange(10) + 1) % 10))
    >>> full_receptive_field(ring, [0], num_layers=3)
    [1, 2, 3, 4]
    >>> sampled_receptive_field(ring, [0], fanouts=[1, 1, 1], seed=0)
    [1, 2, 3, 4]
"""
from __future__ import annotations

import math
from typing import Sequence

import dgl
import numpy as np
import scipy.sparse as sp
import scipy.sparse.csgraph  # noqa: F401  (registers sp.csgraph)
import torch

from ..base.seeding import sampling_on_one_thread

__all__ = [
    "full_receptive_field",
    "sampled_receptive_field",
    "sampling_bound",
    "fanout_product",
    "reachable_nodes",
    "random_seeds",
]


def _as_seed_array(graph: dgl.DGLGraph, seeds) -> np.ndarray:
    ids = np.unique(np.asarray(torch.as_tensor(seeds).cpu(), dtype=np.int64).ravel())
    if ids.size == 0:
        raise ValueError("seeds is empty: pass at least one node id")
    if ids[0] < 0 or ids[-1] >= graph.num_nodes():
        raise ValueError(f"seed ids must lie in [0, {graph.num_nodes()}); got {ids[0]}..{ids[-1]}")
    return ids


def _in_adjacency(graph: dgl.DGLGraph) -> sp.csr_matrix:
    """Row ``v`` of the result lists the in-neighbours (message sources) of ``v``."""
    if not graph.is_homogeneous:
        raise ValueError("receptive fields are defined here for homogeneous graphs; "
                         "convert with dgl.to_homogeneous(graph) first")
    indptr, indices, _ = graph.adj_tensors("csc")  # column = destination, so indices are sources
    n = graph.num_nodes()
    data = np.ones(len(indices), dtype=np.int8)
    return sp.csr_matrix((data, indices.numpy(), indptr.numpy()), shape=(n, n))


def full_receptive_field(graph: dgl.DGLGraph, seeds, num_layers: int) -> list[int]:
    """Exact number of distinct nodes within ``h`` hops (in-edges) of ``seeds``,
    for ``h = 0 .. num_layers``: the input size of an ``h``-layer full-neighbourhood
    GNN whose outputs are the seeds.

    Example:
        >>> import dgl, torch
        >>> star = dgl.graph((torch.tensor([1, 2, 3]), torch.tensor([0, 0, 0])))
        >>> full_receptive_field(star, [0], num_layers=2)
        [1, 4, 4]
    """
    if num_layers < 0:
        raise ValueError(f"num_layers must be >= 0, got {num_layers}")
    adjacency = _in_adjacency(graph)
    visited = np.zeros(graph.num_nodes(), dtype=bool)
    frontier = _as_seed_array(graph, seeds)
    visited[frontier] = True
    counts = [int(frontier.size)]
    for _ in range(num_layers):
        if frontier.size:
            neighbours = np.unique(adjacency[frontier].indices)
            frontier = neighbours[~visited[neighbours]]  # only new nodes need expanding next hop
            visited[frontier] = True
        counts.append(int(visited.sum()))
    return counts


def reachable_nodes(graph: dgl.DGLGraph, seeds) -> int:
    """How many nodes can reach ``seeds`` by any number of hops: the size every
    receptive field saturates at (the seeds' connected components, for an
    undirected graph stored with both edge directions)."""
    adjacency = _in_adjacency(graph)
    _, component = sp.csgraph.connected_components(adjacency, directed=True, connection="weak")
    if (adjacency != adjacency.T).nnz == 0:  # symmetric: weak components are exact
        wanted = np.unique(component[_as_seed_array(graph, seeds)])
        return int(np.isin(component, wanted).sum())
    # Directed graph: breadth-first search until nothing new is found.
    return full_receptive_field(graph, seeds, graph.num_nodes())[-1]


def sampled_receptive_field(graph: dgl.DGLGraph, seeds, fanouts: Sequence[int], seed: int = 0,
                            replace: bool = False) -> list[int]:
    """Number of distinct nodes at hops ``0 .. len(fanouts)`` when each node of
    the previous hop samples ``fanouts[h]`` in-neighbours (``-1`` = all), using
    DGL's ``NeighborSampler`` as minibatch training does.

    ``fanouts`` are listed from the seeds outwards (hop 1 first); DGL lists them
    per GNN layer from the input side, so they are reversed for it.  The sampler
    is seeded with ``dgl.seed(seed)`` and runs on one thread, so a call repeats
    exactly.

    Example:
        >>> import dgl, torch
        >>> star = dgl.graph((torch.tensor([1, 2, 3]), torch.tensor([0, 0, 0])))
        >>> sampled_receptive_field(star, [0], fanouts=[2], seed=0)
        [1, 3]
    """
    fanouts = [int(f) for f in fanouts]
    if not fanouts:
        raise ValueError("fanouts is empty: give one fanout per hop, e.g. [10, 5]")
    if any(f == 0 or f < -1 for f in fanouts):
        raise ValueError(f"each fanout must be a positive count or -1 (all neighbours); got {fanouts}")
    ids = torch.from_numpy(_as_seed_array(graph, seeds))
    sampler = dgl.dataloading.NeighborSampler(list(reversed(fanouts)), replace=replace)
    with sampling_on_one_thread():
        dgl.seed(seed)
        _, _, blocks = sampler.sample_blocks(graph, ids)
    # blocks[-1] is the layer next to the seeds; each block's sources include its destinations.
    return [int(ids.numel())] + [int(block.num_src_nodes()) for block in reversed(blocks)]


def sampling_bound(batch_size: int, fanouts: Sequence[int], num_nodes: int | None = None) -> list[int]:
    """Upper bound on :func:`sampled_receptive_field`, hop by hop:
    ``batch * prod(1 + f_i)`` over the first ``h`` fanouts, capped at ``num_nodes``.

    Example:
        >>> sampling_bound(10, [25, 10])
        [10, 260, 2860]
    """
    bounds, size = [batch_size], batch_size
    for f in fanouts:
        if f < 0:
            raise ValueError("a full-neighbourhood hop (-1) has no fanout bound; pass the maximum degree")
        size *= 1 + int(f)
        bounds.append(size if num_nodes is None else min(size, num_nodes))
    return bounds


def fanout_product(batch_size: int, fanouts: Sequence[int]) -> list[int]:
    """``batch * prod(f_i)`` over the first ``h`` fanouts: the number of leaves of
    the sampled computation tree, the usual back-of-the-envelope size.

    Example:
        >>> fanout_product(10, [25, 10])
        [10, 250, 2500]
    """
    return [batch_size * math.prod(int(f) for f in fanouts[:h]) for h in range(len(fanouts) + 1)]


def random_seeds(graph: dgl.DGLGraph, batch_size: int, seed: int = 0) -> torch.Tensor:
    """``batch_size`` distinct node ids drawn uniformly with a fixed seed (a minibatch).

    Example:
        >>> import dgl, torch
        >>> random_seeds(dgl.rand_graph(100, 300), 5, seed=1).shape
        torch.Size([5])
    """
    if not 0 < batch_size <= graph.num_nodes():
        raise ValueError(f"batch_size must be in 1..{graph.num_nodes()}, got {batch_size}")
    rng = np.random.default_rng(seed)
    return torch.from_numpy(np.sort(rng.choice(graph.num_nodes(), batch_size, replace=False)))
