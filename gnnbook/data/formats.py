"""Parsers for the two raw formats the course ships: Planetoid and GraphData npz.

Book: 8.2.2 a simple GNN training case (raw dataset formats).

Used in: no notebook directly.

Each parser receives bytes whose SHA-256 already matched the registry and
returns :class:`GraphArrays`.

Example:
    >>> from gnnbook.data.registry import DATASETS
    >>> from gnnbook.data.files import raw_files
    >>> arrays = parse_planetoid("cora", raw_files(DATASETS["cora"]),
    ...                          DATASETS["cora"].files)   # doctest: +SKIP
"""
from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .arrays import GraphArrays, per_class_split
from .files import DatasetError, read_verified
from .safe_pickle import restricted_loads


def parse_planetoid(name: str, paths: dict[str, Path], sums: dict[str, str]) -> GraphArrays:
    """Planetoid public split, rebuilt the way Kipf & Welling's loader does it."""
    part = {key.split(f"ind.{name}.", 1)[1]: read_verified(path, sums[key]) for key, path in paths.items()}
    x, y, tx, ty, allx, ally, graph = (restricted_loads(part[k]) for k in ("x", "y", "tx", "ty", "allx", "ally", "graph"))
    test_index = np.array([int(line) for line in part["test.index"].decode().split()], dtype=np.int64)
    test_range = np.sort(test_index)
    if name == "citeseer":
        # CiteSeer has test-range ids with no node in tx/ty: pad them with zero
        # rows so that node ids stay dense (they get no test label).
        full = np.arange(test_range.min(), test_range.max() + 1)
        tx_full = sp.lil_matrix((len(full), x.shape[1]), dtype=np.float32)
        tx_full[test_range - test_range.min(), :] = tx
        ty_full = np.zeros((len(full), y.shape[1]))
        ty_full[test_range - test_range.min(), :] = ty
        tx, ty = tx_full, ty_full
    features = sp.vstack((allx, tx)).tolil()
    features[test_index, :] = features[test_range, :]
    # Row-normalise the bag-of-words features, as Kipf & Welling and DGL do.
    row_sum = np.asarray(features.sum(1)).ravel()
    features = sp.diags(np.divide(1.0, row_sum, out=np.zeros_like(row_sum, dtype=float), where=row_sum > 0)) @ features
    onehot = np.vstack((ally, ty))
    onehot[test_index, :] = onehot[test_range, :]
    label = onehot.argmax(1)
    n = features.shape[0]
    u = np.array([s for s, nbrs in graph.items() for _ in nbrs], dtype=np.int64)
    v = np.array([t for nbrs in graph.values() for t in nbrs], dtype=np.int64)
    keep = (u < n) & (v < n)  # the graph dict has no ids past the feature rows, but be safe
    masks = [np.zeros(n, dtype=bool) for _ in range(3)]
    masks[0][: len(y)] = True
    masks[1][len(y) : len(y) + 500] = True
    masks[2][test_range] = True
    return GraphArrays.from_undirected(u[keep], v[keep], sp.csr_matrix(features), label, *masks)


def _npz_members(data: bytes) -> dict[str, object]:
    """Read an ``.npz`` whose object arrays are pickles, through the allow-list."""
    out = {}
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for member in archive.namelist():
            handle = io.BytesIO(archive.read(member))
            version = np.lib.format.read_magic(handle)
            read_header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            if version not in read_header:
                raise DatasetError(f"unsupported .npy version {version} in member {member}")
            shape, fortran, dtype = read_header[version](handle)
            if dtype.hasobject:
                value = restricted_loads(handle.read())
            else:
                value = np.frombuffer(handle.read(), dtype=dtype).reshape(shape, order="F" if fortran else "C")
            out[member.removesuffix(".npy")] = value
    return out


def parse_graphdata_npz(name: str, paths: dict[str, Path], sums: dict[str, str], seed: int = 0) -> GraphArrays:
    """Amazon / Coauthor graphs; split 20 train and 30 val nodes per class (Shchur et al. 2018)."""
    (file, path), = paths.items()
    members = _npz_members(read_verified(path, sums[file]))
    adj = members["adj_matrix"]
    adj = adj.item() if isinstance(adj, np.ndarray) else adj
    feat = members["node_attr"]
    feat = feat.item() if isinstance(feat, np.ndarray) and feat.dtype == object else feat
    label = np.asarray(members["node_label"], dtype=np.int64)
    coo = sp.coo_matrix(adj)
    return GraphArrays.from_undirected(coo.row, coo.col, feat, label, *per_class_split(label, 20, 30, seed))
