"""Datasets: real graphs found offline or downloaded and checksummed, and
seeded synthetic graphs.

- ``registry``: where every shipped dataset comes from (URL, commit, licence, SHA-256); ``files``: its raw
  files found or downloaded and checked;
- ``formats``: the Planetoid and GraphData parsers; ``safe_pickle``: legacy pickles through an allow-list;
- ``arrays``: the pickle-free form every graph is converted to; ``synthetic``: power-law, SBM and scale graphs;
- ``movielens``: ratings for recommendation (lab 10); ``traffic``: speed series on a sensor graph (lab 11).

Example:
    >>> from gnnbook.data import load_dataset
    >>> g = load_dataset("cora")                      # doctest: +SKIP
    >>> g.num_nodes(), int(g.ndata["train_mask"].sum())  # doctest: +SKIP
    (2708, 140)
"""
from __future__ import annotations

import difflib
import hashlib
from typing import Any

from .arrays import GraphArrays
from .files import DatasetError, cache_dir, raw_files
from .formats import parse_graphdata_npz, parse_planetoid
from .movielens import Ratings, load_ratings, ratings_names
from .registry import DATASETS, RATINGS_DATASETS, TRAFFIC_DATASETS, DatasetSpec
from .synthetic import KINDS as SYNTHETIC_KINDS
from .synthetic import GraphBytes, scale_arrays, scale_graph_bytes, synthetic_arrays
from .traffic import TrafficData, load_traffic, traffic_names

__all__ = [
    "DATASETS",
    "DatasetError",
    "GraphArrays",
    "GraphBytes",
    "RATINGS_DATASETS",
    "Ratings",
    "TRAFFIC_DATASETS",
    "TrafficData",
    "dataset_help",
    "dataset_key",
    "dataset_names",
    "load_arrays",
    "load_dataset",
    "load_ratings",
    "load_traffic",
    "ratings_names",
    "scale_arrays",
    "scale_graph_bytes",
    "synthetic_arrays",
    "traffic_names",
]

_PARSERS = {"planetoid": parse_planetoid, "graphdata-npz": parse_graphdata_npz}
_CACHE_VERSION = 1


def dataset_names() -> list[str]:
    """Every name ``load_dataset`` accepts: shipped datasets, then synthetic kinds."""
    return list(DATASETS) + list(SYNTHETIC_KINDS)


def dataset_help(what: str = "the dataset") -> str:
    """The help text of a command's ``--dataset`` option: every name :func:`load_dataset` takes.  Commands give
    no argparse choices, so that ``Amazon_Photo`` is accepted and a misspelt name gets the closest known one."""
    return (f"{what}: a shipped dataset ({', '.join(DATASETS)}) or a synthetic graph "
            f"({', '.join(SYNTHETIC_KINDS)}; no files needed). Case and - or _ do not matter; an unknown name "
            "gets the closest known one. `python -m gnnbook datasets` lists them with their sizes")


def _unknown(name: str) -> DatasetError:
    close = difflib.get_close_matches(name, dataset_names(), n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return DatasetError(
        f"unknown dataset '{name}'.{hint} Known datasets: {', '.join(DATASETS)}; "
        f"synthetic graphs (no files needed): {', '.join(SYNTHETIC_KINDS)}."
    )


def dataset_key(name: str) -> str:
    """The registry's key for ``name`` (case and ``-`` or ``_`` do not matter), or :class:`DatasetError`
    naming the closest known one: a check that costs nothing, before any work starts.

    Example:
        >>> dataset_key("Amazon_Photo")
        'amazon-photo'
    """
    key = name.lower().replace("_", "-")
    if key not in SYNTHETIC_KINDS and key not in DATASETS:
        raise _unknown(name)
    return key


def load_arrays(name: str, download: bool = True, **synthetic_options: Any) -> GraphArrays:
    """The dataset as plain numpy arrays (see :func:`load_dataset`)."""
    key = dataset_key(name)
    if key == "scale":
        return scale_arrays(**synthetic_options)
    if key in SYNTHETIC_KINDS:
        return synthetic_arrays(key, **synthetic_options)
    if synthetic_options:
        raise TypeError(f"options {sorted(synthetic_options)} only apply to synthetic graphs")
    spec: DatasetSpec = DATASETS[key]
    paths = raw_files(spec, download=download)
    # The converted copy is keyed by the raw files' checksums, so a changed
    # registry never serves a stale conversion.
    digest = hashlib.sha256("".join(spec.files[f] for f in sorted(spec.files)).encode()).hexdigest()[:16]
    converted = cache_dir() / "processed" / f"{spec.name}-v{_CACHE_VERSION}-{digest}.npz"
    if converted.is_file():
        try:
            return GraphArrays.load(converted)
        except (OSError, ValueError, KeyError):
            converted.unlink(missing_ok=True)  # a damaged cache is rebuilt from the raw files
    arrays = _PARSERS[spec.format](spec.name, paths, spec.files)
    try:
        arrays.save(converted)
    except OSError:
        pass  # a read-only cache only costs a re-parse next time
    return arrays


def load_dataset(name: str, download: bool = True, **synthetic_options: Any):
    """Load ``name`` as a DGLGraph with ndata ``feat``, ``label``, ``train_mask``,
    ``val_mask`` and ``test_mask``.

    ``name`` is a shipped dataset (``cora``, ``citeseer``, ``amazon-photo``,
    ``amazon-computers``, ``coauthor-cs``) or a synthetic kind (``powerlaw``,
    ``sbm``) that takes the keyword options of :func:`synthetic_arrays`, for
    example ``load_dataset("powerlaw", num_nodes=100_000, avg_degree=20)``, or
    ``scale``, the graph for millions of nodes, with those of :func:`scale_arrays`.
    """
    return load_arrays(name, download=download, **synthetic_options).to_dgl()
