"""Lab 5's grading code (book 5.4, ``labs/lab05_feature_cache.ipynb``): a pre-sampling cache policy, checked.

Book: 5.4 feature caching (lab 5).

Used in: labs/lab05_feature_cache.ipynb.

The student writes ``my_presample_cache(graph, seed_nodes, fanouts, batch_size, capacity, epochs,
seed)`` (GNNLab's policy: count each node's accesses over pre-sampled epochs, cache the most
accessed).  :func:`student_cache` calls it with every function of
:mod:`gnnbook.ch5_minibatch.caching` and the package's own pre-sampling
(``LAB_REFERENCES["lab05_feature_cache"]``) refused; :func:`score_caches` is what the locked check
measures: it records a training trace of its own (its own seed), asks the student's policy for a
cache pre-sampled with another seed at every capacity, and scores it, and the package's policies,
on that trace with the package's simulator (run outside the refusal).

Example:
    >>> graph, seeds = tiny_graph()
    >>> graph.num_nodes(), seeds.tolist()
    (7, [1, 2, 3])
    >>> rows = score_caches(my_presample_cache, "cora")          # doctest: +SKIP
    >>> rows[2]["fraction"], rows[2]["yours"] > rows[2]["degree"]  # doctest: +SKIP
    (0.1, True)
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import dgl
import numpy as np
import torch

from ...ch5_minibatch import caching
from ...data import load_dataset
from ..labcheck import LAB_REFERENCES, module_functions, reference_forbidden

__all__ = ["CHECK_DATASETS", "FRACTIONS", "HINT", "POLICIES", "REFUSED", "score_caches", "student_cache", "tiny_graph"]

# The datasets the lab's claim is measured to hold on (the check always scores cora as well).
CHECK_DATASETS = ("cora", "citeseer", "amazon-photo")
FRACTIONS = (0.02, 0.05, 0.1, 0.2)
POLICIES = ("random", "degree", "lru", "fifo", "oracle", "belady")
# Everything LAB_REFERENCES names, and Belady's bound too, which LAB_REFERENCES leaves out (chapter 5b
# prints it, and it is no pre-sampling).
REFUSED: tuple[str, ...] = tuple(dict.fromkeys((*LAB_REFERENCES["lab05_feature_cache"],
                                                *module_functions("gnnbook.ch5_minibatch.caching"))))
HINT = "count the accesses yourself over the loader's minibatches and rank them (np.lexsort or a stable sort)"


def student_cache(policy: Callable[..., Any], *args: Any) -> torch.Tensor:
    """``policy(*args)`` with the package's caching and pre-sampling refused, as a 1-D int64 tensor."""
    with reference_forbidden(REFUSED, hint=HINT):
        cached = policy(*args)
    cached = torch.as_tensor(np.asarray(cached) if isinstance(cached, (list, np.ndarray)) else cached)
    if cached.dim() != 1:
        raise AssertionError(f"return a 1-D tensor of node ids, got shape {tuple(cached.shape)}")
    return cached.to(torch.int64)


def tiny_graph() -> tuple[dgl.DGLGraph, torch.Tensor]:
    """The lab's tiny graph (undirected) and its three seeds::

        1 - 0 - 2 - 5 - 6      each seed's minibatch (batch size 1, fanout -1) reads the seed and
            |                  its neighbours: counts per epoch 0:3, 1:1, 2:1, 3:1, 4:1, 5:1, 6:0
            3 - 4
    """
    src, dst = [0, 0, 0, 3, 2, 5], [1, 2, 3, 4, 5, 6]
    return dgl.graph((src + dst, dst + src), num_nodes=7), torch.tensor([1, 2, 3])


def score_caches(policy: Callable[..., Any], dataset: str = "cora", fractions: Sequence[float] = FRACTIONS,
                 fanouts: Sequence[int] = (10, 10), batch_size: int = 64, presample_epochs: int = 5,
                 measured_epochs: int = 10, trace_seed: int = 0, presample_seed: int = 1) -> list[dict[str, Any]]:
    """One row per capacity: the hit rate of the student's cache (pre-sampled with ``presample_seed``)
    and of the package's policies on a training trace recorded here with ``trace_seed``, and what
    the policy returned (``returned`` ids, ``distinct`` of them, for ``capacity`` rows).

    More than 8 parameters: the trace's settings and its two seeds (trace, pre-sampling), each set by lab 5's
    check cell from the lab's own parameters.
    """
    graph = load_dataset(dataset)
    train_nodes = graph.ndata["train_mask"].nonzero().squeeze(1)
    n = graph.num_nodes()
    trace = caching.record_trace(graph, train_nodes, list(fanouts), batch_size, epochs=measured_epochs, seed=trace_seed)
    degrees = caching.graph_degrees(graph)
    rows = []
    for fraction in fractions:
        capacity = caching.capacity_for(fraction, n)
        cached = student_cache(policy, graph, train_nodes, list(fanouts), batch_size, capacity, presample_epochs,
                               presample_seed)
        valid = bool(((cached >= 0) & (cached < n)).all())
        row = dict(dataset=dataset, fraction=fraction, capacity=capacity, returned=len(cached),
                   distinct=len(torch.unique(cached)), accesses=len(trace),
                   yours=caching.static_hits(trace, cached.numpy(), n) / len(trace) if valid else float("nan"))
        for name in POLICIES:
            row[name] = caching.simulate(trace, name, capacity, n, degrees=degrees)["hit_rate"]
        rows.append(row)
    return rows
