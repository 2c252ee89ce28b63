"""Unpickle legacy dataset files through an allow-list.

Book: none (safe loading of legacy dataset files).

Used in: no notebook directly.

Planetoid (Cora, CiteSeer) and the GraphData ``.npz`` files store scipy and
numpy objects as Python pickles.  ``pickle.load`` would run any callable named
in the file, so we only ever unpickle bytes whose SHA-256 already matched, and
even then only the handful of classes these formats need.

Example:
    >>> import io, pickle, numpy as np
    >>> restricted_loads(pickle.dumps(np.arange(3))).tolist()
    [0, 1, 2]
"""
from __future__ import annotations

import io
import pickle
from typing import Any

# (module, name) pairs a Planetoid / GraphData pickle may reference.  Python 2
# pickles name builtins ``__builtin__``; scipy moved ``csr_matrix`` between
# private modules over the years, so several spellings map to the same class.
_ALLOWED: dict[tuple[str, str], str] = {
    ("numpy.core.multiarray", "_reconstruct"): "numpy.core.multiarray._reconstruct",
    ("numpy", "ndarray"): "numpy.ndarray",
    ("numpy", "dtype"): "numpy.dtype",
    ("scipy.sparse.csr", "csr_matrix"): "scipy.sparse.csr_matrix",
    ("scipy.sparse._csr", "csr_matrix"): "scipy.sparse.csr_matrix",
    ("collections", "defaultdict"): "collections.defaultdict",
    ("__builtin__", "list"): "builtins.list",
    ("builtins", "list"): "builtins.list",
}


class UnsafePickleError(pickle.UnpicklingError):
    """Raised when a pickle names a class outside the allow-list."""


def _resolve(dotted: str) -> Any:
    import importlib

    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


class _AllowListUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        target = _ALLOWED.get((module, name))
        if target is None:
            raise UnsafePickleError(
                f"refusing to unpickle {module}.{name}: not on gnnbook's allow-list "
                "for dataset files"
            )
        return _resolve(target)


def restricted_loads(data: bytes) -> Any:
    """Unpickle ``data`` (Python 2 or 3 pickle) allowing only dataset classes."""
    return _AllowListUnpickler(io.BytesIO(data), encoding="latin1").load()
