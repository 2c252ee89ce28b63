"""Feature caching for minibatch GNN training: cache policies and a hit-rate simulator (book section 5.4).

Book: 5.4 feature caching.

Used in: chapters/05b_feature_caching.ipynb, chapters/05f_distributed_cache.ipynb,
labs/lab05_feature_cache.ipynb.

Every minibatch step reads the feature rows of its *input nodes*.  Where the
rows live far away (CPU memory for a GPU trainer, another machine for a
DistDGL trainer), keeping some rows close (a *cache*) turns some reads into
*hits*.  This module replays *access traces* recorded from DGL's real
neighbour sampler against cache policies:

- static (chosen once, before training): ``random``; ``degree``, highest
  out-degree first (PaGraph); ``presample``, most-accessed in one pre-sampled
  epoch first (GNNLab); and ``oracle``, the best static cache, chosen with the
  true access counts of the measured epochs (a bound, not a policy);
- dynamic (updated on every miss): ``lru`` and ``fifo``;
- ``belady``: Belady's offline optimum on the trace (on a miss, of the cached
  rows and the incoming one, the one whose next use is farthest away is the
  one not kept), starting full like a static cache: an upper bound for every
  policy here.  The dynamic caches start empty, as a real one does.

Terms (the same as the distributed trainer's real cache): one *access* is one
unique input node of one minibatch; *capacity* is a number of rows; the *hit
rate* is hits / accesses.  Ties in a ranking go to the lower node id.

Example:
    >>> trace = np.array([0, 1, 0, 1, 2, 3, 2, 3])
    >>> [simulate(trace, policy, capacity=2, num_nodes=4)["hits"] for policy in ("lru", "oracle", "belady")]
    [4, 4, 6]
"""
from __future__ import annotations

import contextlib
import heapq
from collections import OrderedDict, deque
from typing import Any, Sequence

import numpy as np
import torch

STATIC_POLICIES = ("random", "degree", "presample", "oracle")
DYNAMIC_POLICIES = ("lru", "fifo")
POLICIES = STATIC_POLICIES + DYNAMIC_POLICIES + ("belady",)


def check_policy(policy: str) -> str:
    """``policy`` in lower case, or a ValueError naming the choices."""
    name = str(policy).lower()
    if name not in POLICIES:
        raise ValueError(f"unknown cache policy {policy!r}; choose one of {', '.join(POLICIES)}")
    return name


def check_fraction(fraction: float) -> float:
    """``fraction`` as a float in (0, 1], or a ValueError saying what is allowed."""
    value = float(fraction)
    if not 0.0 < value <= 1.0:
        raise ValueError(f"cache fraction must be in (0, 1] (a share of the graph's nodes), got {fraction!r}")
    return value


def capacity_for(fraction: float, num_nodes: int) -> int:
    """Rows a cache of ``fraction`` of a graph of ``num_nodes`` holds: ``round(fraction * num_nodes)``.

    Example:
        >>> capacity_for(0.1, 2708)
        271
    """
    return int(round(check_fraction(fraction) * num_nodes))


# --- access traces from the real sampler ------------------------------------

@contextlib.contextmanager
def _one_sampling_thread():
    """Run DGL on one thread inside the block.  Sampled with more threads, the
    same seed gave other neighbours in another process (measured here on a
    100,000-node graph: DGL's parallel format conversion and sampling are not
    ordered); on one thread every process records the same trace."""
    import dgl

    threads = dgl.utils.get_num_threads()
    dgl.utils.set_num_threads(1)
    try:
        yield
    finally:
        dgl.utils.set_num_threads(threads)


def record_trace(graph, seed_nodes, fanouts: Sequence[int], batch_size: int, epochs: int = 1,
                 seed: int = 0) -> np.ndarray:
    """The feature-row accesses of ``epochs`` epochs of DGL's neighbour sampler
    over ``seed_nodes``: each minibatch's input nodes (unique within it), in
    order, concatenated into one int64 array.  Seeded: the same call gives the
    same trace, in every process, when the graph's CSC format is built here
    (not yet by someone else): DGL runs on one thread meanwhile.

    Example:
        >>> import dgl
        >>> g = dgl.graph(([0, 1, 2], [1, 2, 0]))
        >>> sorted(record_trace(g, torch.tensor([0]), [5], batch_size=1).tolist())
        [0, 2]
    """
    from ..training.minibatch import neighbor_loader
    from ..base.seeding import set_seed

    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    seed_nodes = torch.as_tensor(seed_nodes, dtype=torch.int64)
    if len(seed_nodes) == 0:
        raise ValueError("no seed nodes to sample minibatches from")
    with _one_sampling_thread():
        graph.create_formats_()
        set_seed(seed)
        loader = neighbor_loader(graph, seed_nodes, fanouts, batch_size, shuffle=True)
        batches = [input_nodes.numpy() for _ in range(epochs) for input_nodes, _, _ in loader]
    return np.concatenate(batches).astype(np.int64)


def access_counts(trace: np.ndarray, num_nodes: int) -> np.ndarray:
    """How often each node is accessed in ``trace`` (length ``num_nodes``)."""
    return np.bincount(np.asarray(trace, dtype=np.int64), minlength=num_nodes)


# --- static caches ------------------------------------------------------------

def top_ranked(score: np.ndarray, capacity: int, candidates: np.ndarray | None = None) -> np.ndarray:
    """The ``capacity`` candidates with the highest ``score``, ties to the lower
    node id (``candidates`` default: every node).

    Example:
        >>> top_ranked(np.array([1, 5, 5, 0]), 2).tolist()
        [1, 2]
    """
    score = np.asarray(score)
    nodes = np.arange(len(score)) if candidates is None else np.sort(np.asarray(candidates, dtype=np.int64))
    order = np.lexsort((nodes, -score[nodes]))   # last key first: score descending, then node id
    return nodes[order[:capacity]]


def static_cache(policy: str, capacity: int, num_nodes: int, *, degrees: np.ndarray | None = None,
                 presample_counts: np.ndarray | None = None, oracle_counts: np.ndarray | None = None,
                 candidates: np.ndarray | None = None, seed: int = 0) -> np.ndarray:
    """The node ids a static ``policy`` caches, ``capacity`` of them, chosen
    among ``candidates`` (default: every node).  ``degree`` needs ``degrees``
    (out-degrees), ``presample`` the access counts of a pre-sampled epoch,
    ``oracle`` those of the measured epochs; ``random`` draws with ``seed``.

    Example:
        >>> static_cache("degree", 2, 4, degrees=np.array([3, 1, 3, 9])).tolist()
        [3, 0]
    """
    policy = check_policy(policy)
    if policy not in STATIC_POLICIES:
        raise ValueError(f"{policy!r} is not a static policy; static policies are {', '.join(STATIC_POLICIES)}")
    pool = np.arange(num_nodes) if candidates is None else np.sort(np.asarray(candidates, dtype=np.int64))
    capacity = min(int(capacity), len(pool))
    if policy == "random":
        return np.sort(np.random.default_rng(seed).permutation(pool)[:capacity])
    score = {"degree": degrees, "presample": presample_counts, "oracle": oracle_counts}[policy]
    if score is None:
        needs = {"degree": "degrees", "presample": "presample_counts", "oracle": "oracle_counts"}[policy]
        raise ValueError(f"policy {policy!r} needs {needs}= (one value per node)")
    score = np.asarray(score)
    if score.shape != (num_nodes,):
        raise ValueError(f"policy {policy!r}: expected one score per node ({num_nodes}), got shape {score.shape}")
    return top_ranked(score, capacity, pool)


def static_hits(trace: np.ndarray, cached: np.ndarray, num_nodes: int) -> int:
    """Accesses of ``trace`` that a cache holding ``cached`` serves."""
    mask = np.zeros(num_nodes, dtype=bool)
    mask[np.asarray(cached, dtype=np.int64)] = True
    return int(mask[trace].sum())


# --- dynamic caches and Belady's bound ----------------------------------------

def lru_hits(trace: np.ndarray, capacity: int) -> int:
    """Hits of a least-recently-used cache of ``capacity`` rows, starting empty."""
    if capacity <= 0:
        return 0
    cache: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for node in trace.tolist():
        if node in cache:
            hits += 1
            cache.move_to_end(node)
        else:
            cache[node] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return hits


def fifo_hits(trace: np.ndarray, capacity: int) -> int:
    """Hits of a first-in-first-out cache of ``capacity`` rows, starting empty
    (a hit does not refresh a row: the oldest insertion leaves first)."""
    if capacity <= 0:
        return 0
    cache: set[int] = set()
    order: deque[int] = deque()
    hits = 0
    for node in trace.tolist():
        if node in cache:
            hits += 1
        else:
            cache.add(node)
            order.append(node)
            if len(order) > capacity:
                cache.discard(order.popleft())
    return hits


def next_use(trace: np.ndarray) -> np.ndarray:
    """For every position of ``trace``, the position of the same node's next
    access (``len(trace)`` when there is none).

    Example:
        >>> next_use(np.array([4, 7, 4, 4])).tolist()
        [2, 4, 3, 4]
    """
    trace = np.asarray(trace)
    following = np.full(len(trace), len(trace), dtype=np.int64)
    order = np.argsort(trace, kind="stable")        # positions grouped by node, in time order
    same = trace[order[1:]] == trace[order[:-1]]
    following[order[:-1][same]] = order[1:][same]
    return following


def belady_hits(trace: np.ndarray, capacity: int, warm: bool = True) -> int:
    """Hits of Belady's offline optimum with ``capacity`` rows.

    On a miss with a full cache, of the cached rows and the incoming one, the
    row whose next use is farthest away is not kept (the incoming row may be
    the one).  A max-heap of next uses (stale entries skipped) finds it.
    ``warm``: the cache starts full, as a static cache does, with the best
    start there is, the rows first used earliest (what Belady's rule keeps when
    the cache is filled with every row before the trace); so no static cache
    of the same capacity can have more hits.  ``warm=False`` starts empty.
    """
    if capacity <= 0:
        return 0
    trace = np.asarray(trace, dtype=np.int64)
    never = len(trace)
    following = next_use(trace).tolist()
    cached: dict[int, int] = {}        # node -> position of its next use
    if warm:
        nodes, first = np.unique(trace, return_index=True)
        earliest = np.argsort(first, kind="stable")[:capacity]
        cached = dict(zip(nodes[earliest].tolist(), first[earliest].tolist()))
    heap = [(-upcoming, node) for node, upcoming in cached.items()]   # stale when cached[node] differs
    heapq.heapify(heap)
    hits = 0
    for position, node in enumerate(trace.tolist()):
        upcoming = following[position]
        if node in cached:
            hits += 1
        elif upcoming == never:
            continue                    # never used again: not worth a row
        elif len(cached) >= capacity:
            while True:
                farthest, victim = heap[0]
                if cached.get(victim) == -farthest:
                    break
                heapq.heappop(heap)
            if -farthest <= upcoming:
                continue                # the incoming row is the one used last
            heapq.heappop(heap)
            del cached[victim]
        cached[node] = upcoming
        heapq.heappush(heap, (-upcoming, node))
    return hits


# --- one simulation, and the hit rate against capacity ------------------------

def simulate(trace: np.ndarray, policy: str, capacity: int, num_nodes: int, *,
             degrees: np.ndarray | None = None, presample_counts: np.ndarray | None = None,
             candidates: np.ndarray | None = None, seed: int = 0) -> dict[str, Any]:
    """Replay ``trace`` against ``policy`` with ``capacity`` rows; returns
    ``dict(policy, capacity, accesses, hits, misses, hit_rate)``.  Static
    policies choose among ``candidates`` (default: every node); the oracle's
    counts are ``trace``'s own.

    Example:
        >>> simulate(np.array([0, 1, 0, 1, 2]), "oracle", 1, 3)["hit_rate"]
        0.4
    """
    policy = check_policy(policy)
    trace = np.asarray(trace, dtype=np.int64)
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0 rows, got {capacity}")
    if policy in STATIC_POLICIES:
        oracle_counts = access_counts(trace, num_nodes) if policy == "oracle" else None
        cached = static_cache(policy, capacity, num_nodes, degrees=degrees, presample_counts=presample_counts,
                              oracle_counts=oracle_counts, candidates=candidates, seed=seed)
        hits = static_hits(trace, cached, num_nodes)
    else:
        hits = {"lru": lru_hits, "fifo": fifo_hits, "belady": belady_hits}[policy](trace, int(capacity))
    accesses = len(trace)
    return dict(policy=policy, capacity=int(capacity), accesses=accesses, hits=hits, misses=accesses - hits,
                hit_rate=hits / accesses if accesses else 0.0)


def hit_rate_curve(trace: np.ndarray, num_nodes: int, fractions: Sequence[float],
                   policies: Sequence[str] = POLICIES, **options: Any) -> list[dict[str, Any]]:
    """One :func:`simulate` row per (policy, fraction), with ``fraction`` added;
    capacity = ``round(fraction * num_nodes)``; ``options`` go to :func:`simulate`.

    Example:
        >>> rows = hit_rate_curve(np.array([0, 1, 0, 1]), 2, [0.5], ["lru", "belady"])
        >>> [(r["policy"], r["hits"]) for r in rows]
        [('lru', 0), ('belady', 2)]
    """
    policies = [check_policy(p) for p in policies]
    capacities = [capacity_for(f, num_nodes) for f in fractions]
    return [dict(simulate(trace, policy, capacity, num_nodes, **options), fraction=float(fraction))
            for policy in policies for fraction, capacity in zip(fractions, capacities)]


def graph_degrees(graph) -> np.ndarray:
    """Out-degree of every node (how many nodes can sample it: its in-edges'
    sources are the nodes it is a neighbour of, and DGL samples in-edges)."""
    return graph.out_degrees().numpy()


def trace_and_presample(graph, seed_nodes, fanouts: Sequence[int], batch_size: int, epochs: int = 1,
                        seed: int = 0, presample_seed: int | None = None,
                        presample_epochs: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The measured trace (``epochs`` epochs, ``seed``) and the access counts of
    ``presample_epochs`` pre-sampled epochs with another seed (``presample_seed``,
    default ``seed + 1``), as GNNLab pre-samples before training.  The counts
    estimate each row's access frequency: a small training set (a few
    minibatches per epoch) needs more than one pre-sampled epoch.

    Example:
        >>> import dgl
        >>> g = dgl.graph(([0, 1, 2], [1, 2, 0]))
        >>> trace, counts = trace_and_presample(g, torch.tensor([0, 1]), [1], batch_size=1)
        >>> len(trace), int(counts.sum())
        (4, 4)
    """
    trace = record_trace(graph, seed_nodes, fanouts, batch_size, epochs=epochs, seed=seed)
    presample_seed = seed + 1 if presample_seed is None else presample_seed
    warmup = record_trace(graph, seed_nodes, fanouts, batch_size, epochs=presample_epochs, seed=presample_seed)
    return trace, access_counts(warmup, graph.num_nodes())


def simulate_partitioned_cache(graph, parts, train_nids_per_part: Sequence, fanouts: Sequence[int],
                               batch_size: int, policy: str, fraction: float, epochs: int = 1,
                               seed: int = 0, *, presample_epochs: int = 1) -> dict[str, Any]:
    """Predict a DistDGL job's feature-cache hit rate for the partition
    assignment ``parts`` (a partition id per node).

    Trainer ``k`` samples minibatches over ``train_nids_per_part[k]`` on
    ``graph`` (the graph the trainer samples: for gnnbook.distributed,
    ``gnnbook.training.train.prepare_graph(g)``); its *remote* accesses are the input
    nodes outside partition ``k``; its cache holds ``round(fraction *
    num_nodes)`` rows chosen only among nodes outside partition ``k``.  The
    pre-sampling policy counts ``presample_epochs`` epochs of the trainer's own
    sampler with seed ``seed + 1 + k``; the measured epochs use seed ``seed + k``.  Returns
    ``dict(policy, fraction, capacity, hits, misses, remote_accesses,
    accesses, hit_rate, per_part)`` with hit rate = sum of hits / sum of remote
    accesses.

    Example:
        >>> from gnnbook.data import load_dataset
        >>> g = load_dataset("cora")                                   # doctest: +SKIP
        >>> parts = np.arange(g.num_nodes()) % 2                       # doctest: +SKIP
        >>> train = [np.flatnonzero(g.ndata["train_mask"].numpy() & (parts == k)) for k in (0, 1)]  # doctest: +SKIP
        >>> r = simulate_partitioned_cache(g, parts, train, [10, 10], 64, "degree", 0.1)  # doctest: +SKIP
        >>> 0 < r["hit_rate"] < 1                                      # doctest: +SKIP
        True

    More than 8 parameters: it predicts one DistDGL job and takes that job's own settings (partition, training
    nodes, fanouts, batch size, cache policy and fraction, epochs, seed), so a notebook passes the job's values
    unchanged.
    """
    policy = check_policy(policy)
    fraction = check_fraction(fraction)
    num_nodes = graph.num_nodes()
    parts = np.asarray(parts, dtype=np.int64)
    if parts.shape != (num_nodes,):
        raise ValueError(f"parts must give a partition id per node ({num_nodes}), got shape {parts.shape}")
    if len(train_nids_per_part) != int(parts.max()) + 1:
        raise ValueError(f"train_nids_per_part has {len(train_nids_per_part)} entries for "
                         f"{int(parts.max()) + 1} partitions; give one list of training nodes per partition")
    capacity = capacity_for(fraction, num_nodes)
    degrees = graph_degrees(graph)
    per_part = []
    for part, seeds in enumerate(train_nids_per_part):
        trace, presample_counts = trace_and_presample(graph, seeds, fanouts, batch_size, epochs,
                                                      seed=seed + part, presample_seed=seed + 1 + part,
                                                      presample_epochs=presample_epochs)
        remote = trace[parts[trace] != part]
        result = simulate(remote, policy, capacity, num_nodes, degrees=degrees,
                          presample_counts=presample_counts,
                          candidates=np.flatnonzero(parts != part), seed=seed + part)
        per_part.append(dict(part=part, accesses=len(trace), remote_accesses=len(remote),
                             hits=result["hits"], misses=result["misses"]))
    hits = sum(p["hits"] for p in per_part)
    remote_total = sum(p["remote_accesses"] for p in per_part)
    return dict(policy=policy, fraction=fraction, capacity=capacity, hits=hits, misses=remote_total - hits,
                remote_accesses=remote_total, accesses=sum(p["accesses"] for p in per_part),
                hit_rate=hits / remote_total if remote_total else 0.0, per_part=per_part)
