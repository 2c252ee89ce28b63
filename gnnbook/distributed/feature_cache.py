"""A trainer's cache of remote feature rows (book section 5.4), for the DistDGL trainer.

Book: 5.4 feature caching, in the DistDGL trainer.

Used in: chapters/05f_distributed_cache.ipynb.

Each trainer keeps ``round(fraction x all nodes)`` feature rows of nodes that
live on *other* partitions (its own rows are already local, in shared memory),
fetched once from the graph servers before training.  Each minibatch then
reads its cached rows from the cache and fetches only the rest (its local rows
and the remote misses) through the :class:`dgl.distributed.DistTensor`.
Features never change during training, so a cached row is the server's row,
bit for bit: the cache changes where a row comes from, never its value.

Which rows (:func:`select_cached_nodes`, the same terms as ``gnnbook.ch5_minibatch.caching``'s simulator):

- ``degree`` (PaGraph): highest degree first, the nodes most neighbours can sample;
- ``presample`` (GNNLab): the trainer runs its own sampler over its own training
  nodes for one epoch with a fixed seed, before training; most accessed first.

Ties go to the lower node id.  Counted per fetch: local rows, cache hits and
misses among the remote rows (an access is a unique input node of a minibatch),
and the bytes of the rows fetched from other machines.

Example:
    >>> feats = torch.arange(12.0).reshape(6, 2)
    >>> owner = lambda ids: (ids >= 3).long()             # nodes 0-2 on partition 0, 3-5 on 1
    >>> cache = FeatureCache(feats, owner, own_part=0, cached=torch.tensor([4]), num_nodes=6)
    >>> bool(torch.equal(cache.fetch(torch.tensor([0, 4, 5])), feats[[0, 4, 5]]))
    True
    >>> cache.take_counts()
    {'local_rows': 1, 'hits': 1, 'misses': 1, 'remote_bytes': 8}
"""
from __future__ import annotations

from typing import Callable

import torch

from ..ch5_minibatch.caching import top_ranked


def cache_capacity(fraction: float, num_nodes: int) -> int:
    """Rows per trainer: ``round(fraction x num_nodes)`` (nodes of the whole graph).

    Example:
        >>> cache_capacity(0.1, 2708)
        271
    """
    return int(round(fraction * num_nodes))


def select_cached_nodes(candidates: torch.Tensor, scores: torch.Tensor, capacity: int) -> torch.Tensor:
    """The ``capacity`` candidates with the highest score (degree for ``degree``,
    pre-sampled access count for ``presample``), ties by lower node id.

    Example:
        >>> select_cached_nodes(torch.tensor([7, 3, 5, 9]), torch.tensor([2, 5, 2, 1]), 2)
        tensor([3, 5])
    """
    by_id = torch.argsort(candidates)   # ranked by position in id order: ties go to the lower id
    ranked = top_ranked(scores[by_id].to(torch.float64).numpy(), capacity)
    return candidates[by_id][torch.from_numpy(ranked)]


class FeatureCache:
    """Feature rows of ``cached`` nodes (remote to ``own_part``) kept in this
    process; :meth:`fetch` serves them and reads every other row from ``features``
    (a DistTensor, or any tensor-like with ``shape``, ``dtype`` and indexing).
    ``owner_of(ids)`` gives each node's partition (the partition book's ``nid2partid``)."""

    def __init__(self, features, owner_of: Callable[[torch.Tensor], torch.Tensor], own_part: int,
                 cached: torch.Tensor, num_nodes: int):
        cached = torch.as_tensor(cached, dtype=torch.int64)
        if len(cached) and bool((owner_of(cached) == own_part).any()):
            raise ValueError("a trainer caches rows of other partitions only; its own rows are local already")
        self.features, self.owner_of, self.own_part = features, owner_of, own_part
        self.cached = cached
        self.slot = torch.full((num_nodes,), -1, dtype=torch.int64)
        self.slot[cached] = torch.arange(len(cached))
        self.row_bytes = int(features.shape[1]) * torch.empty(0, dtype=features.dtype).element_size()
        # Filled once, from the servers: what the cache costs before training.
        self.rows = features[cached] if len(cached) else torch.empty(0, int(features.shape[1]), dtype=features.dtype)
        self.fill_bytes = len(cached) * self.row_bytes
        self._counts = dict(local_rows=0, hits=0, misses=0, remote_bytes=0)

    def __len__(self) -> int:
        return len(self.cached)

    def fetch(self, ids: torch.Tensor) -> torch.Tensor:
        """The feature rows of ``ids`` (unique node ids), in that order."""
        remote = self.owner_of(ids) != self.own_part
        num_remote = int(remote.sum())
        if not len(self.cached):
            hit = torch.zeros_like(remote)
            out = self.features[ids]
        else:
            slot = self.slot[ids]
            hit = slot >= 0  # only remote nodes are ever cached
            out = torch.empty(len(ids), self.rows.shape[1], dtype=self.rows.dtype)
            out[hit] = self.rows[slot[hit]]
            if not bool(hit.all()):
                out[~hit] = self.features[ids[~hit]]
        hits = int(hit.sum())
        counts = self._counts
        counts["local_rows"] += len(ids) - num_remote
        counts["hits"] += hits
        counts["misses"] += num_remote - hits
        counts["remote_bytes"] += (num_remote - hits) * self.row_bytes
        return out

    def take_counts(self) -> dict[str, int]:
        """The counts since the last call (local rows, hits, misses, remote bytes), then zero."""
        counts, self._counts = self._counts, dict.fromkeys(self._counts, 0)
        return counts


def remote_candidates(owner_of: Callable[[torch.Tensor], torch.Tensor], own_part: int, num_nodes: int) -> torch.Tensor:
    """Every node of the graph that is not in ``own_part`` (what a cache may hold)."""
    ids = torch.arange(num_nodes)
    return ids[owner_of(ids) != own_part]


def presample_counts(loader, num_nodes: int) -> torch.Tensor:
    """Accesses per node in one pass of ``loader`` (a unique input node of a minibatch is one access)."""
    counts = torch.zeros(num_nodes, dtype=torch.int64)
    for input_nodes, _seeds, _blocks in loader:
        counts += torch.bincount(input_nodes, minlength=num_nodes)
    return counts


def simulator_inputs(part_config) -> tuple:
    """``(graph, parts, train_nids_per_part)`` of a partition config, in the node
    ids the DistDGL job uses (partitions own consecutive id ranges): what
    ``gnnbook.ch5_minibatch.caching.simulate_partitioned_cache`` takes to predict this job's
    hit rate, ties between equal scores then broken on the same ids.

    Example:
        >>> graph, parts, train = simulator_inputs("cora-random-2/cora.json")  # doctest: +SKIP
        >>> len(train), int(parts.max())                                         # doctest: +SKIP
        (2, 1)
    """
    from .baseline import whole_graph
    from .partition_files import open_partition

    partition = open_partition(part_config, node_data=False)  # read once, for the graph and the node map
    graph = whole_graph(partition)
    node_map = partition.config["node_map"]  # {ntype: [[start, end) per partition]}
    ranges = next(iter(node_map.values())) if isinstance(node_map, dict) else node_map
    parts = torch.cat([torch.full((int(end) - int(start),), k) for k, (start, end) in enumerate(ranges)])
    train = graph.ndata["train_mask"].bool()
    return graph, parts.numpy(), [torch.nonzero(train & (parts == k))[:, 0].numpy() for k in range(len(ranges))]
