"""Three ways to store a graph's edges: COO, CSR and CSC, and their memory.

Book: 2.1 graph representation (COO, CSR, CSC).

Used in: chapters/02_gnn_models.ipynb.

- COO (coordinate list): one ``(src, dst)`` pair per edge, ``2E`` indices.
- CSR (compressed sparse row): edges sorted by source; ``indptr`` (``N + 1``
  offsets) says where each node's out-edges start in ``indices`` (``E``
  destinations).  A node's successors are one contiguous slice.
- CSC (compressed sparse column): the same, sorted by destination, so a
  node's predecessors (the neighbours it aggregates from) are one slice.
  CSC of ``A`` is CSR of ``A``'s transpose.

Sorting is stable, so within one node the neighbours keep edge-id order,
the order DGL's ``successors`` / ``predecessors`` return them in.  The arrays
are plain numpy (built with ``np.bincount`` / ``np.argsort``); ``to_scipy``
gives the matching ``scipy.sparse`` matrix for cross-checking.

Example:
    >>> import numpy as np
    >>> coo = COO(np.array([0, 0, 2]), np.array([1, 2, 1]), num_nodes=3)
    >>> csr = coo.to_csr()
    >>> csr.indptr.tolist(), csr.indices.tolist()
    ([0, 2, 2, 3], [1, 2, 1])
    >>> csr.neighbors(0).tolist(), coo.to_csc().neighbors(1).tolist()
    ([1, 2], [0, 2])
    >>> coo.num_indices, csr.num_indices      # 2E vs (N + 1) + E
    (6, 7)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = ["COO", "CSR", "CSC", "from_dgl", "memory_table"]

_INDEX_DTYPES = (np.int32, np.int64)


def _index_array(values: Any, name: str, dtype: np.dtype) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of node ids, got shape {array.shape}")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"{name} must hold integers, got dtype {array.dtype}; convert with .astype(np.int64)")
    return np.ascontiguousarray(array, dtype=dtype)


def _check_dtype(dtype: Any) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype not in [np.dtype(d) for d in _INDEX_DTYPES]:
        raise ValueError(f"index dtype must be int32 or int64, got {dtype}")
    return dtype


def _check_ids(ids: np.ndarray, num_nodes: int, name: str) -> None:
    if ids.size and (ids.min() < 0 or ids.max() >= num_nodes):
        raise ValueError(f"{name} has node ids outside [0, {num_nodes}): min {ids.min()}, max {ids.max()}; "
                         f"pass num_nodes larger than the largest id")


@dataclass(frozen=True, eq=False)
class COO:
    """Edge list: edge ``e`` goes from ``src[e]`` to ``dst[e]``."""

    src: np.ndarray
    dst: np.ndarray
    num_nodes: int

    def __init__(self, src: Any, dst: Any, num_nodes: int, dtype: Any = np.int64):
        dtype = _check_dtype(dtype)
        src, dst = _index_array(src, "src", dtype), _index_array(dst, "dst", dtype)
        if src.shape != dst.shape:
            raise ValueError(f"src and dst must have one entry per edge, got {src.size} and {dst.size}")
        if num_nodes < 0:
            raise ValueError(f"num_nodes must be >= 0, got {num_nodes}")
        _check_ids(src, num_nodes, "src")
        _check_ids(dst, num_nodes, "dst")
        object.__setattr__(self, "src", src)
        object.__setattr__(self, "dst", dst)
        object.__setattr__(self, "num_nodes", int(num_nodes))

    @property
    def num_edges(self) -> int:
        return int(self.src.size)

    @property
    def num_indices(self) -> int:
        """Stored integers: ``2E``."""
        return self.src.size + self.dst.size

    @property
    def nbytes(self) -> int:
        return self.src.nbytes + self.dst.nbytes

    def to_csr(self) -> "CSR":
        indptr, order = _compress(self.src, self.num_nodes)
        return CSR(indptr, self.dst[order], self.num_nodes)

    def to_csc(self) -> "CSC":
        indptr, order = _compress(self.dst, self.num_nodes)
        return CSC(indptr, self.src[order], self.num_nodes)

    def to_scipy(self) -> sp.coo_matrix:
        """Adjacency ``A[src, dst] = 1`` (duplicate edges add up)."""
        ones = np.ones(self.num_edges, dtype=np.float32)
        return sp.coo_matrix((ones, (self.src, self.dst)), shape=(self.num_nodes, self.num_nodes))


def _compress(keys: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Offsets of each key's run and the stable order that groups edges by key."""
    counts = np.bincount(keys, minlength=num_nodes)
    indptr = np.zeros(num_nodes + 1, dtype=keys.dtype)
    np.cumsum(counts, out=indptr[1:])
    return indptr, np.argsort(keys, kind="stable")


@dataclass(frozen=True, eq=False)
class _Compressed:
    """Shared part of CSR and CSC: node ``v``'s edges are
    ``indices[indptr[v]:indptr[v + 1]]``."""

    indptr: np.ndarray
    indices: np.ndarray
    num_nodes: int

    def __init__(self, indptr: Any, indices: Any, num_nodes: int):
        # Keep int32 when given int32 (half the bytes); anything else is stored as int64.
        dtype = np.dtype(np.int32) if np.asarray(indices).dtype == np.int32 else np.dtype(np.int64)
        indptr, indices = _index_array(indptr, "indptr", dtype), _index_array(indices, "indices", dtype)
        if indptr.size != num_nodes + 1:
            raise ValueError(f"indptr must have num_nodes + 1 = {num_nodes + 1} entries, got {indptr.size}")
        if indptr[0] != 0 or indptr[-1] != indices.size or np.any(np.diff(indptr) < 0):
            raise ValueError("indptr must start at 0, never decrease, and end at len(indices) "
                             f"= {indices.size}; got first {indptr[0]}, last {indptr[-1]}")
        _check_ids(indices, num_nodes, "indices")
        object.__setattr__(self, "indptr", indptr)
        object.__setattr__(self, "indices", indices)
        object.__setattr__(self, "num_nodes", int(num_nodes))

    @property
    def num_edges(self) -> int:
        return int(self.indices.size)

    @property
    def num_indices(self) -> int:
        """Stored integers: ``(N + 1) + E``."""
        return self.indptr.size + self.indices.size

    @property
    def nbytes(self) -> int:
        return self.indptr.nbytes + self.indices.nbytes

    def neighbors(self, node: int) -> np.ndarray:
        """The contiguous slice of ``indices`` that belongs to ``node``."""
        if not 0 <= node < self.num_nodes:
            raise IndexError(f"node {node} out of range [0, {self.num_nodes})")
        return self.indices[self.indptr[node] : self.indptr[node + 1]]

    def degrees(self) -> np.ndarray:
        return np.diff(self.indptr)

    def _expand(self) -> tuple[np.ndarray, np.ndarray]:
        """(compressed key of every edge, its index), in stored order."""
        keys = np.repeat(np.arange(self.num_nodes, dtype=self.indices.dtype), self.degrees())
        return keys, self.indices


class CSR(_Compressed):
    """Rows are sources: ``neighbors(v)`` are ``v``'s successors (out-edges)."""

    def to_coo(self) -> COO:
        src, dst = self._expand()
        return COO(src, dst, self.num_nodes, dtype=self.indices.dtype)

    def to_csc(self) -> "CSC":
        return self.to_coo().to_csc()

    def to_scipy(self) -> sp.csr_matrix:
        ones = np.ones(self.num_edges, dtype=np.float32)
        return sp.csr_matrix((ones, self.indices, self.indptr), shape=(self.num_nodes, self.num_nodes))


class CSC(_Compressed):
    """Columns are destinations: ``neighbors(v)`` are ``v``'s predecessors
    (in-edges), exactly what message passing sums over."""

    def to_coo(self) -> COO:
        dst, src = self._expand()
        return COO(src, dst, self.num_nodes, dtype=self.indices.dtype)

    def to_csr(self) -> CSR:
        return self.to_coo().to_csr()

    def to_scipy(self) -> sp.csc_matrix:
        ones = np.ones(self.num_edges, dtype=np.float32)
        return sp.csc_matrix((ones, self.indices, self.indptr), shape=(self.num_nodes, self.num_nodes))


def from_dgl(graph: Any, dtype: Any = np.int64) -> COO:
    """The COO of a homogeneous DGLGraph, in edge-id order.

    Example:
        >>> import dgl, torch
        >>> from_dgl(dgl.graph((torch.tensor([0, 1]), torch.tensor([1, 2])))).to_csr().indptr.tolist()
        [0, 1, 2, 2]
    """
    if len(getattr(graph, "canonical_etypes", [None])) != 1 or len(graph.ntypes) != 1:
        raise ValueError("from_dgl needs a homogeneous graph (one node type, one edge type); "
                         "convert with dgl.to_homogeneous(graph) first")
    src, dst = graph.edges(order="eid")
    return COO(src.numpy(), dst.numpy(), graph.num_nodes(), dtype=dtype)


def memory_table(coo: COO, dtype: Any = np.int64) -> list[dict[str, Any]]:
    """One row per format: stored indices and bytes (edge values not counted)."""
    dtype = _check_dtype(dtype)
    coo = COO(coo.src, coo.dst, coo.num_nodes, dtype=dtype)
    return [
        dict(format=name, indices=fmt.num_indices, bytes=fmt.nbytes,
             formula=formula, dtype=str(dtype))
        for name, fmt, formula in (("COO", coo, "2E"), ("CSR", coo.to_csr(), "(N+1)+E"),
                                   ("CSC", coo.to_csc(), "(N+1)+E"))
    ]
