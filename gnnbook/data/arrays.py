"""The pickle-free, in-memory form every dataset is converted to.

Book: 8.2.2 a simple GNN training case (the datasets' in-memory form).

Used in: no notebook directly.

``GraphArrays`` holds plain numpy arrays; ``to_dgl`` turns it into the
DGLGraph the course uses and ``save`` / ``load`` keep a converted copy on disk
as an ``.npz`` without object arrays (so it never needs unpickling).

Example:
    >>> import numpy as np
    >>> g = GraphArrays.from_undirected(np.array([0]), np.array([1]), np.eye(2, dtype="float32"),
    ...                                 np.array([0, 1]), *[np.array([True, False])] * 3)
    >>> g.num_edges          # both directions are stored
    2
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .files import atomic_write_bytes

_FIELDS = ("src", "dst", "feat", "label", "train_mask", "val_mask", "test_mask")


@dataclass
class GraphArrays:
    src: np.ndarray  # int64, every undirected edge stored in both directions
    dst: np.ndarray
    feat: np.ndarray  # float32 (num_nodes, num_features)
    label: np.ndarray  # int64
    train_mask: np.ndarray  # bool
    val_mask: np.ndarray
    test_mask: np.ndarray

    @property
    def num_nodes(self) -> int:
        return int(self.feat.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.src.shape[0])

    @classmethod
    def from_undirected(cls, u, v, feat, label, train_mask, val_mask, test_mask) -> "GraphArrays":
        """Symmetrise edges ``u - v``, dropping self-loops and duplicates."""
        n = len(label)
        adj = sp.coo_matrix((np.ones(len(u), dtype=np.float32), (u, v)), shape=(n, n)).tocsr()
        adj = ((adj + adj.T) > 0).astype(np.int8).tocoo()
        keep = adj.row != adj.col
        if sp.issparse(feat):
            feat = feat.toarray()
        return cls(
            src=adj.row[keep].astype(np.int64),
            dst=adj.col[keep].astype(np.int64),
            feat=np.ascontiguousarray(feat, dtype=np.float32),
            label=np.asarray(label, dtype=np.int64),
            train_mask=np.asarray(train_mask, dtype=bool),
            val_mask=np.asarray(val_mask, dtype=bool),
            test_mask=np.asarray(test_mask, dtype=bool),
        )

    def save(self, path: Path) -> None:
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **{name: getattr(self, name) for name in _FIELDS})
        atomic_write_bytes(path, buffer.getvalue())

    @classmethod
    def load(cls, path: Path) -> "GraphArrays":
        with np.load(path, allow_pickle=False) as arrays:
            return cls(**{name: arrays[name] for name in _FIELDS})

    def to_dgl(self):
        """A DGLGraph with ndata ``feat``, ``label``, ``train_mask``, ``val_mask``, ``test_mask``."""
        import dgl
        import torch

        graph = dgl.graph((torch.from_numpy(self.src), torch.from_numpy(self.dst)), num_nodes=self.num_nodes)
        for name in _FIELDS[2:]:
            graph.ndata[name] = torch.from_numpy(np.ascontiguousarray(getattr(self, name)))
        return graph


def per_class_split(label: np.ndarray, train_per_class: int, val_per_class: int, seed: int):
    """Shchur et al.'s split: ``train_per_class`` and ``val_per_class`` nodes of
    every class for training and validation, all the rest for testing."""
    rng = np.random.default_rng(seed)
    train = np.zeros(len(label), dtype=bool)
    val = np.zeros(len(label), dtype=bool)
    for c in np.unique(label):
        members = rng.permutation(np.flatnonzero(label == c))
        train[members[:train_per_class]] = True
        val[members[train_per_class : train_per_class + val_per_class]] = True
    return train, val, ~(train | val)


def random_split(num_nodes: int, fractions=(0.6, 0.2), seed: int = 0):
    """Seeded random train/val/test masks with the given train and val fractions; the test set is
    the rest, or a third fraction when given (then the nodes left over are in no set)."""
    order = np.random.default_rng(seed).permutation(num_nodes)
    n_train, n_val = int(fractions[0] * num_nodes), int(fractions[1] * num_nodes)
    n_test = int(fractions[2] * num_nodes) if len(fractions) > 2 else num_nodes - n_train - n_val
    masks = [np.zeros(num_nodes, dtype=bool) for _ in range(3)]
    masks[0][order[:n_train]] = True
    masks[1][order[n_train : n_train + n_val]] = True
    masks[2][order[n_train + n_val : n_train + n_val + n_test]] = True
    return tuple(masks)
