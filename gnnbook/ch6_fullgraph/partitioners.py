"""Graph partitioning for full-graph training (book 6.2.1): partitioners and their metrics.

Book: 6.2.1 graph partitioning.

Used in: chapters/06a_fullgraph_parallelism.ipynb.

Subgraph-parallel training (:mod:`gnnbook.ch6_fullgraph.subgraph`) gives every
machine one part of the nodes; each layer then fetches the embeddings of the
*halo*, the remote in-neighbours of its nodes.  A partitioner therefore wants
few cut edges (little halo, few bytes) and balanced parts (no straggler).
:func:`partition_metrics` measures both for ANY node-to-part assignment:

- ``edge_cut``: fraction of edges whose ends lie in different parts (a random
  assignment cuts about ``1 - 1/K``);
- ``replication_factor``: ``(N + sum of halo sizes) / N``, the copies of a
  node that exist when every part also stores its halo;
- ``vertex_balance`` / ``edge_balance``: largest part over the mean part, in
  nodes and in edges (an edge belongs to its destination's part).

Partitioners (:func:`partition`): ``random`` (a seeded permutation dealt round
robin), ``metis`` (DGL's METIS binding) and ``pymetis`` (METIS, Karypis &
Kumar, SIAM J. Sci. Comput. 1998), and two one-pass streaming ones written out
below: ``ldg`` (Linear Deterministic Greedy, Stanton & Kliot, KDD 2012) and
``fennel`` (Tsourakakis et al., WSDM 2014).  A vertex cut (edge partitioning,
PowerGraph, Gonzalez et al., OSDI 2012) assigns *edges* instead and replicates
the nodes they touch: :func:`vertex_cut` and :func:`vertex_cut_metrics`.

Not to be confused with :mod:`gnnbook.distributed.partition_files`, which writes
DistDGL's partition folders (chapter 8).

Example:
    >>> import dgl, torch
    >>> g = dgl.graph(([0, 1, 2, 3], [1, 0, 3, 2]))        # two 2-cycles
    >>> m = partition_metrics(g, torch.tensor([0, 0, 1, 1]))
    >>> m["edge_cut"], m["replication_factor"], m["vertex_balance"]
    (0.0, 1.0, 1.0)
"""
from __future__ import annotations

import contextlib
import io
import time
from typing import Any, Sequence

import numpy as np
import torch

METHODS = ("random", "ldg", "fennel", "metis", "pymetis")
VERTEX_CUT_METHODS = ("random", "greedy")


def _as_numpy(assignment: Any) -> np.ndarray:
    return assignment.numpy() if isinstance(assignment, torch.Tensor) else np.asarray(assignment)


def check_assignment(num_nodes: int, assignment: Any, num_parts: int | None = None) -> tuple[np.ndarray, int]:
    """The assignment as int64 numpy and its number of parts; a clear ValueError for a wrong
    length, a part id outside ``0..K-1`` or an empty part."""
    a = _as_numpy(assignment).astype(np.int64, copy=False)
    if a.ndim != 1 or len(a) != num_nodes:
        raise ValueError(f"assignment has shape {tuple(a.shape)}; it needs one part id per node ({num_nodes})")
    k = int(a.max()) + 1 if num_parts is None else num_parts
    if len(a) and (a.min() < 0 or a.max() >= k):
        raise ValueError(f"part ids must lie in 0..{k - 1}, got {int(a.min())}..{int(a.max())}")
    sizes = np.bincount(a, minlength=k)
    if (sizes == 0).any():
        raise ValueError(f"parts {np.flatnonzero(sizes == 0).tolist()} of {k} are empty; every part needs a node")
    return a, k


def _check_num_parts(num_nodes: int, num_parts: int) -> None:
    if not 1 <= num_parts <= num_nodes:
        raise ValueError(f"num_parts must lie in 1..{num_nodes} (the number of nodes), got {num_parts}")


def partition_metrics(graph, assignment: Any, num_parts: int | None = None) -> dict[str, Any]:
    """Edge cut, halo sizes, replication factor and balance of a node assignment.

    The halo of part ``p`` is every node outside ``p`` with an edge into ``p``.

    Example:
        >>> import dgl, torch
        >>> g = dgl.graph(([0, 1, 1, 2], [1, 0, 2, 1]))   # path 0-1-2, both directions
        >>> m = partition_metrics(g, torch.tensor([0, 0, 1]))
        >>> m["edge_cut"], m["halo_sizes"], m["replication_factor"]
        (0.5, [1, 1], 1.6666666666666667)
    """
    n = graph.num_nodes()
    a, k = check_assignment(n, assignment, num_parts)
    src, dst = (t.numpy() for t in graph.edges())
    part_src, part_dst = a[src], a[dst]
    cut = part_src != part_dst
    # halo of p: distinct sources of cut edges that end in p
    pairs = np.unique(part_dst[cut] * n + src[cut])
    halo = np.bincount(pairs // n, minlength=k)
    nodes = np.bincount(a, minlength=k)
    edges = np.bincount(part_dst, minlength=k)
    m = max(len(src), 1)
    return {"num_parts": k, "edge_cut": float(cut.sum() / m), "cut_edges": int(cut.sum()),
            "halo_sizes": halo.tolist(), "replication_factor": float((n + halo.sum()) / n),
            "part_nodes": nodes.tolist(), "part_edges": edges.tolist(),
            "vertex_balance": float(nodes.max() / nodes.mean()),
            "edge_balance": float(edges.max() / max(edges.mean(), 1e-12))}


def undirected_csr(graph) -> tuple[np.ndarray, np.ndarray]:
    """``(indptr, indices)`` of the graph made undirected, without self loops or repeats
    (the input METIS and the streaming partitioners read)."""
    n = graph.num_nodes()
    src, dst = (t.numpy().astype(np.int64) for t in graph.edges())
    u, v = np.concatenate([src, dst]), np.concatenate([dst, src])
    keep = u != v
    key = np.unique(u[keep] * n + v[keep])
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(key // n, minlength=n), out=indptr[1:])
    return indptr, key % n


def _stream(graph, num_parts: int, score, slack: float, seed: int) -> np.ndarray:
    """One pass over the nodes in a seeded random order: each goes to the part with the best
    ``score(neighbours_in_part, part_sizes)`` among parts below capacity ``slack * N / K``;
    ties go to the smaller part."""
    n = graph.num_nodes()
    indptr, indices = undirected_csr(graph)
    bounds = indptr.tolist()                     # Python ints slice faster than numpy scalars
    capacity = int(np.ceil(slack * n / num_parts))
    part = np.full(n, num_parts, dtype=np.int64)   # "part K" = not placed yet
    sizes = np.zeros(num_parts, dtype=np.float64)
    for v in np.random.default_rng(seed).permutation(n).tolist():
        together = np.bincount(part[indices[bounds[v]:bounds[v + 1]]], minlength=num_parts + 1)[:num_parts]
        s = score(together, sizes)
        s[sizes >= capacity] = -np.inf
        p = np.lexsort((sizes, -s))[0]           # best score; ties to the smaller part
        part[v] = p
        sizes[p] += 1
    return part


def ldg(graph, num_parts: int, slack: float = 1.1, seed: int = 0) -> np.ndarray:
    """Linear Deterministic Greedy: neighbours already in the part, times how empty it is,
    ``|N(v) & P_i| * (1 - |P_i| / C)``, ``C = slack * N / K``."""
    capacity = slack * graph.num_nodes() / num_parts
    return _stream(graph, num_parts, lambda together, sizes: together * (1 - sizes / capacity), slack, seed)


def fennel(graph, num_parts: int, slack: float = 1.1, gamma: float = 1.5, seed: int = 0) -> np.ndarray:
    """Fennel: neighbours in the part minus a marginal size cost,
    ``|N(v) & P_i| - alpha * gamma * |P_i|^(gamma-1)``, ``alpha = sqrt(K) m / N^gamma``."""
    n = graph.num_nodes()
    m = len(undirected_csr(graph)[1]) / 2
    alpha = np.sqrt(num_parts) * m / n ** gamma
    return _stream(graph, num_parts, lambda together, sizes: together - alpha * gamma * sizes ** (gamma - 1),
                   slack, seed)


def _metis_dgl(graph, num_parts: int) -> np.ndarray:
    import dgl

    with contextlib.redirect_stdout(io.StringIO()):  # DGL prints its timings
        return dgl.metis_partition_assignment(graph, num_parts).numpy().astype(np.int64)


def _pymetis(graph, num_parts: int, seed: int) -> np.ndarray:
    import pymetis

    indptr, indices = undirected_csr(graph)
    _, membership = pymetis.part_graph(num_parts, xadj=indptr, adjncy=indices, options=pymetis.Options(seed=seed))
    return np.asarray(membership, dtype=np.int64)


def partition(graph, num_parts: int, method: str = "metis", seed: int = 0) -> torch.Tensor:
    """A node-to-part assignment (int64 tensor of length N) by ``method`` (one of :data:`METHODS`).

    Example:
        >>> from gnnbook.data import load_dataset
        >>> a = partition(load_dataset("cora"), 2, "fennel")       # doctest: +SKIP
        >>> partition_metrics(load_dataset("cora"), a)["edge_cut"] < 0.5   # doctest: +SKIP
        True
    """
    if method not in METHODS:
        raise ValueError(f"unknown partitioner {method!r}; choose one of {', '.join(METHODS)}")
    n = graph.num_nodes()
    _check_num_parts(n, num_parts)
    if num_parts == 1:
        return torch.zeros(n, dtype=torch.int64)
    if method == "random":
        a = np.random.default_rng(seed).permutation(n) % num_parts
    elif method == "ldg":
        a = ldg(graph, num_parts, seed=seed)
    elif method == "fennel":
        a = fennel(graph, num_parts, seed=seed)
    elif method == "metis":
        a = _metis_dgl(graph, num_parts)
    else:
        a = _pymetis(graph, num_parts, seed)
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))


def compare(graph, num_parts: int, methods: Sequence[str] = ("random", "ldg", "fennel", "metis"),
            seed: int = 0) -> list[dict[str, Any]]:
    """One row per method: its metrics and its run time in seconds (wall clock, this machine).

    Example:
        >>> from gnnbook.data import load_dataset
        >>> [r["method"] for r in compare(load_dataset("cora"), 2, ("random", "metis"))]  # doctest: +SKIP
        ['random', 'metis']
    """
    rows = []
    for method in methods:
        start = time.perf_counter()
        a = partition(graph, num_parts, method, seed)
        seconds = time.perf_counter() - start
        rows.append({"method": method, "seconds": seconds, **partition_metrics(graph, a, num_parts),
                     "assignment": a})
    return rows


# ----- vertex cut: assign edges, replicate the nodes they touch -----

def vertex_cut(graph, num_parts: int, method: str = "greedy", seed: int = 0) -> torch.Tensor:
    """An edge-to-part assignment (one part per undirected edge ``u < v``, in the order of
    :func:`undirected_edges`).  ``random`` hashes edges; ``greedy`` is PowerGraph's rule:
    a part both ends already touch, else one either end touches, else the least-loaded part
    (always the least loaded among the candidates)."""
    if method not in VERTEX_CUT_METHODS:
        raise ValueError(f"unknown vertex-cut method {method!r}; choose one of {', '.join(VERTEX_CUT_METHODS)}")
    _check_num_parts(graph.num_nodes(), num_parts)
    u, v = undirected_edges(graph)
    rng = np.random.default_rng(seed)
    if method == "random":
        return torch.from_numpy(rng.integers(0, num_parts, len(u)))
    touched = np.zeros((graph.num_nodes(), num_parts), dtype=bool)
    load = np.zeros(num_parts, dtype=np.int64)
    out = np.empty(len(u), dtype=np.int64)
    for e in rng.permutation(len(u)):
        a, b = touched[u[e]], touched[v[e]]
        candidates = np.flatnonzero(a & b)
        if not len(candidates):
            candidates = np.flatnonzero(a | b)
        if not len(candidates):
            candidates = np.arange(num_parts)
        p = candidates[np.argmin(load[candidates])]
        out[e] = p
        load[p] += 1
        touched[u[e], p] = touched[v[e], p] = True
    return torch.from_numpy(out)


def undirected_edges(graph) -> tuple[np.ndarray, np.ndarray]:
    """Every undirected edge once, as ``(u, v)`` with ``u < v``."""
    indptr, indices = undirected_csr(graph)
    u = np.repeat(np.arange(graph.num_nodes()), np.diff(indptr))
    keep = u < indices
    return u[keep], indices[keep]


def vertex_cut_metrics(graph, edge_assignment: Any, num_parts: int) -> dict[str, Any]:
    """Replication factor of a vertex cut (mean number of parts that hold a copy of a node;
    a node without edges counts once) and its edge balance.

    Example:
        >>> import dgl, torch
        >>> g = dgl.graph(([0, 1], [1, 2]))                  # edges 0-1 and 1-2
        >>> vertex_cut_metrics(g, torch.tensor([0, 1]), 2)["replication_factor"]   # node 1 in both
        1.3333333333333333
    """
    u, v = undirected_edges(graph)
    e = _as_numpy(edge_assignment).astype(np.int64)
    if len(e) != len(u):
        raise ValueError(f"edge assignment has {len(e)} entries; the graph has {len(u)} undirected edges")
    n = graph.num_nodes()
    copies = np.unique(np.concatenate([u * num_parts + e, v * num_parts + e]))
    per_node = np.maximum(np.bincount(copies // num_parts, minlength=n), 1)
    edges = np.bincount(e, minlength=num_parts)
    return {"replication_factor": float(per_node.mean()), "part_edges": edges.tolist(),
            "edge_balance": float(edges.max() / max(edges.mean(), 1e-12))}
