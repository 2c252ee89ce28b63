"""Lab 5's checks (book 5.4, ``labs/lab05_feature_cache.ipynb``): a pre-sampling cache policy.

Book: 5.4 feature caching (lab 5).

Used in: labs/lab05_feature_cache.ipynb.

The student writes ``my_presample_cache(graph, seed_nodes, fanouts, batch_size, capacity, epochs,
seed)`` (GNNLab's policy: count each node's accesses over pre-sampled epochs, cache the most
accessed).  The checks ask the student (:mod:`gnnbook.course.grading.student`: in the autograder a
sandboxed process that cannot import the package's caching, here the notebook) only for the cache
the policy returns on inputs they choose: :func:`check_tiny_graphs` on tiny graphs whose counts
are known, :func:`check_scores` on real datasets, where :func:`score_caches` records a training
trace of its own (its own seed) and scores the student's cache, pre-sampled with another seed at
every capacity, and the package's policies on it with the package's simulator, in this process.

Example:
    >>> graph, seeds = tiny_graph()
    >>> graph.num_nodes(), seeds.tolist()
    (7, [1, 2, 3])
    >>> check_tiny_graphs(Here(globals()))          # doctest: +SKIP
    {'cases': 4}
"""
from __future__ import annotations

from typing import Any, Sequence

import dgl
import torch

from ...ch5_minibatch import caching
from ...data import load_dataset
from ..vetting import Policy
from .engine import Check
from .student import LAB05_PRELUDE, Here, graph_payload

__all__ = ["CHECKS", "CHECK_DATASETS", "FRACTIONS", "Here", "POLICIES", "POLICY", "PRELUDE", "cache_fault",
           "check_scores", "check_tiny_graphs", "score_caches", "tiny_graph"]

# The datasets the lab's claim is measured to hold on (the check always scores cora as well).
CHECK_DATASETS = ("cora", "citeseer", "amazon-photo")
FRACTIONS = (0.02, 0.05, 0.1, 0.2)
POLICIES = ("random", "degree", "lru", "fifo", "oracle", "belady")
PRELUDE = LAB05_PRELUDE
# Counting and ranking: tensors, numpy and the standard library's containers (the package, whose caching
# module and trainer pre-sample, cannot be imported; the prelude gives set_seed and neighbor_loader).
POLICY = Policy(modules=("torch", "dgl", "numpy", "math", "collections", "itertools", "heapq"),
                references=("presample_counts", "select_cached_nodes", "record_trace", "access_counts", "top_ranked",
                            "static_cache", "trace_and_presample"))


def tiny_graph() -> tuple[dgl.DGLGraph, torch.Tensor]:
    """The lab's tiny graph (undirected) and its three seeds::

        1 - 0 - 2 - 5 - 6      each seed's minibatch (batch size 1, fanout -1) reads the seed and
            |                  its neighbours: counts per epoch 0:3, 1:1, 2:1, 3:1, 4:1, 5:1, 6:0
            3 - 4
    """
    src, dst = [0, 0, 0, 3, 2, 5], [1, 2, 3, 4, 5, 6]
    return dgl.graph((src + dst, dst + src), num_nodes=7), torch.tensor([1, 2, 3])


def _path_graph() -> dgl.DGLGraph:
    """0 - 1 - 2 - 3 - 4 - 5 - 6, and 3 - 7 (two hops around 2 and around 4)."""
    src, dst = [0, 1, 2, 3, 4, 5, 3], [1, 2, 3, 4, 5, 6, 7]
    return dgl.graph((src + dst, dst + src), num_nodes=8)


def _cache_call(graph: dgl.DGLGraph, seeds: torch.Tensor, fanouts: Sequence[int], batch_size: int, capacity: int,
                epochs: int, seed: int) -> tuple[str, dict[str, Any]]:
    return ("lab05.cache", {"graph": graph_payload(graph), "seed_nodes": seeds, "fanouts": list(fanouts),
                            "batch_size": batch_size, "capacity": capacity, "epochs": epochs, "seed": seed})


def _ids(got: Any) -> torch.Tensor:
    if not isinstance(got, torch.Tensor) or got.dim() != 1 or got.is_floating_point():
        raise AssertionError(f"return a 1-D tensor of node ids, got {type(got).__name__} "
                             f"{tuple(getattr(got, 'shape', ()))}")
    return got.to(torch.int64)


def check_tiny_graphs(student, thorough: bool = False) -> dict[str, Any]:
    """Task 1: on tiny graphs with known counts, the right rows, in the right order (most accessed first,
    ties to the lower id), of the right size."""
    tiny, seeds = tiny_graph()
    cases = [((tiny, seeds, [-1], 1, 1, 2, 0), [0], "capacity 1"),
             ((tiny, seeds, [-1], 1, 3, 2, 0), [0, 1, 2], "capacity 3"),
             ((tiny, seeds, [-1], 1, 6, 2, 0), [0, 1, 2, 3, 4, 5], "capacity 6"),
             ((tiny, seeds, [-1], 3, 2, 1, 0), [0, 1],
              "one minibatch of all three seeds reads every node once (0 too)")]
    if thorough:
        path = _path_graph()
        cases += [((path, torch.tensor([2, 4]), [-1, -1], 1, 5, 2, 3), [2, 3, 4, 7, 0], "two layers, two seeds"),
                  ((path, torch.tensor([2, 4]), [-1, -1], 2, 3, 3, 1), [0, 1, 2], "two layers, one minibatch"),
                  ((path, torch.tensor([0, 6, 7]), [-1], 1, 4, 1, 5), [0, 1, 3, 5], "one layer, unread nodes last")]
    for (_, expected, case), got in zip(cases, student.run([_cache_call(*args) for args, _, _ in cases])):
        got = _ids(got).tolist()
        assert got == expected, f"{case}: expected {expected} (most accessed first, ties to the lower id), got {got}"
    return {"cases": len(cases)}


def score_caches(student, dataset: str = "cora", fractions: Sequence[float] = FRACTIONS,
                 fanouts: Sequence[int] = (10, 10), batch_size: int = 64, presample_epochs: int = 5,
                 measured_epochs: int = 10, trace_seed: int = 0, presample_seed: int = 1) -> list[dict[str, Any]]:
    """One row per capacity: the hit rate of the student's cache (pre-sampled with ``presample_seed``)
    and of the package's policies on a training trace recorded here with ``trace_seed``, and what
    the policy returned (``returned`` ids, ``distinct`` of them, for ``capacity`` rows).

    More than 8 parameters: the trace's settings and its two seeds (trace, pre-sampling), each set by lab 5's
    check from the lab's own parameters.
    """
    graph = load_dataset(dataset)
    train_nodes = graph.ndata["train_mask"].nonzero().squeeze(1)
    n = graph.num_nodes()
    trace = caching.record_trace(graph, train_nodes, list(fanouts), batch_size, epochs=measured_epochs, seed=trace_seed)
    degrees = caching.graph_degrees(graph)
    capacities = [caching.capacity_for(fraction, n) for fraction in fractions]
    caches = student.run([_cache_call(graph, train_nodes, fanouts, batch_size, capacity, presample_epochs,
                                      presample_seed)
                          for capacity in capacities])
    rows = []
    for fraction, capacity, cached in zip(fractions, capacities, caches):
        cached = _ids(cached)
        valid = bool(((cached >= 0) & (cached < n)).all())
        row = dict(dataset=dataset, fraction=fraction, capacity=capacity, returned=len(cached),
                   distinct=len(torch.unique(cached)), accesses=len(trace),
                   yours=caching.static_hits(trace, cached.numpy(), n) / len(trace) if valid else float("nan"))
        for name in POLICIES:
            row[name] = caching.simulate(trace, name, capacity, n, degrees=degrees)["hit_rate"]
        rows.append(row)
    return rows


def cache_fault(row: dict[str, Any]) -> str | None:
    """What is wrong with the student's cache in one row of :func:`score_caches` (None: nothing)."""
    where = f"{row['dataset']} at {100 * row['fraction']:g}% ({row['capacity']} rows)"
    if row["returned"] != row["capacity"] or row["distinct"] != row["capacity"]:
        return (f"{where}: return {row['capacity']} distinct node ids, got {row['returned']} "
                f"({row['distinct']} distinct)")
    if not row["yours"] >= 2 * row["random"]:
        return f"{where}: your cache ({row['yours']:.3f}) is not far above a random one ({row['random']:.3f})"
    if not (row["yours"] >= row["degree"] - 0.01 and row["yours"] >= 0.9 * row["oracle"]):
        return (f"{where}: your cache's hit rate {row['yours']:.3f} vs degree {row['degree']:.3f} and oracle "
                f"{row['oracle']:.3f}: count accesses over all pre-sampled epochs and keep the most-accessed rows")
    if not row["yours"] <= row["belady"] + 1e-12:
        return f"{where}: no cache can beat Belady's optimum ({row['belady']:.3f}): check the scoring"
    return None


def check_scores(student, thorough: bool = False, dataset: str = "cora") -> dict[str, Any]:
    """Task 1: at every capacity the cache has the right size, and at 10% it beats random, is as good as degree
    or better and is near the oracle, on cora and on ``dataset`` (``thorough``: every capacity but the
    smallest of cora and citeseer, on another trace and pre-sampling seed)."""
    checked = {name: score_caches(student, name) for name in dict.fromkeys(["cora", dataset]) if name in CHECK_DATASETS}
    for scores in checked.values():
        for row in scores:
            assert row["returned"] == row["distinct"] == row["capacity"], cache_fault(row)
        fault = cache_fault(next(r for r in scores if r["fraction"] == 0.1))
        assert fault is None, fault
    if thorough:
        for name in ("cora", "citeseer"):
            for row in score_caches(student, name, trace_seed=2, presample_seed=3)[1:]:
                assert cache_fault(row) is None, cache_fault(row)
    return {"checked": checked, "datasets": len(checked)}


CHECKS = (Check(1, "the cache on tiny graphs with known counts", check_tiny_graphs),
          Check(1, "at 10% capacity the cache beats random, matches degree or better and is near the oracle",
                check_scores))
