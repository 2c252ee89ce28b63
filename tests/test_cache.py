"""Feature-cache policies and the hit-rate simulator (gnnbook.ch5_minibatch.caching)."""
import functools
import itertools

import numpy as np
import pytest
import torch

from gnnbook.ch5_minibatch import caching as cache
from gnnbook.data import load_dataset

# A hand-made trace: 0 is hot, 1 warm, 2 and 3 come late; worked out by hand below.
TRACE = np.array([0, 1, 0, 2, 0, 1, 3, 3, 0])


@pytest.mark.parametrize("policy, capacity, hits", [
    ("lru", 2, 3),      # 0 1 [0] 2(evicts 1) [0] 1(evicts 2) 3(evicts 0) [3] 0(evicts 1)
    ("fifo", 2, 2),     # 0 1 [0] 2(evicts 0) 0(evicts 1) 1(evicts 2) 3(evicts 0) [3] 0(evicts 1)
    ("belady", 2, 7),   # starts with {0, 1}: [0 1 0] 2(skip: never again) [0 1] 3(evicts 1) [3 0]
    ("oracle", 2, 6),   # counts 0:4, 1:2, 3:2 -> {0, 1} (tie 1/3 to the lower id)
    ("degree", 2, 5),   # degrees below -> {0, 2}
    ("presample", 2, 6),  # counts below -> {0, 3}
    ("random", 4, 9),   # every node fits
    ("lru", 1, 1), ("fifo", 1, 1),
    ("belady", 1, 4),   # starts with {0}: [0] 1(skip) [0] 2(skip) [0] 1(skip) 3(evicts 0) [3] 0
])
def test_hits_on_a_hand_made_trace(policy, capacity, hits):
    degrees = np.array([5, 1, 5, 0])
    presample = np.array([3, 0, 1, 3])
    result = cache.simulate(TRACE, policy, capacity, 4, degrees=degrees, presample_counts=presample)
    assert (result["hits"], result["misses"], result["accesses"]) == (hits, len(TRACE) - hits, len(TRACE))
    assert result["hit_rate"] == pytest.approx(hits / len(TRACE))


def test_static_selection_ranks_by_score_then_lower_id_among_candidates():
    score = np.array([2, 9, 2, 9, 7])
    assert cache.static_cache("degree", 3, 5, degrees=score).tolist() == [1, 3, 4]
    assert cache.static_cache("degree", 2, 5, degrees=score, candidates=[0, 2, 4]).tolist() == [4, 0]
    chosen = cache.static_cache("random", 2, 5, candidates=[0, 2, 4], seed=3)
    assert len(chosen) == 2 and set(chosen) <= {0, 2, 4}
    assert cache.static_cache("random", 2, 5, candidates=[0, 2, 4], seed=3).tolist() == chosen.tolist()


def test_next_use_points_at_the_same_nodes_next_access():
    trace = np.array([3, 1, 3, 3, 1, 2])
    assert cache.next_use(trace).tolist() == [2, 4, 3, 6, 6, 6]


def _best_by_brute_force(trace, capacity, start):
    """Most hits over every choice on every miss: skip the row, or keep it (evicting any cached row when full)."""
    @functools.lru_cache(maxsize=None)
    def best(position, cached):
        if position == len(trace):
            return 0
        node = trace[position]
        if node in cached:
            return 1 + best(position + 1, cached)
        options = [best(position + 1, cached)]
        if len(cached) < capacity:
            options.append(best(position + 1, cached | {node}))
        else:
            options += [best(position + 1, (cached - {victim}) | {node}) for victim in cached]
        return max(options)
    return best(0, frozenset(start))


@pytest.mark.parametrize("seed", range(12))
def test_belady_is_optimal_on_small_traces_by_brute_force(seed):
    rng = np.random.default_rng(seed)
    trace = tuple(rng.integers(0, 5, 11).tolist())
    nodes = sorted(set(trace))
    for capacity in (1, 2, 3):
        cold = _best_by_brute_force(trace, capacity, ())
        assert cache.belady_hits(np.array(trace), capacity, warm=False) == cold, (trace, capacity)
        warm = max(_best_by_brute_force(trace, capacity, start)
                   for start in itertools.combinations(nodes, min(capacity, len(nodes))))
        assert cache.belady_hits(np.array(trace), capacity) == warm, (trace, capacity)


@pytest.fixture(scope="module")
def cora_trace():
    g = load_dataset("cora")
    train = g.ndata["train_mask"].nonzero().squeeze(1)
    trace, presample = cache.trace_and_presample(g, train, [10, 10], 32, epochs=2, seed=0)
    return g, train, trace, presample


def test_a_recorded_trace_repeats_and_is_unique_within_a_minibatch():
    g = load_dataset("cora")
    seeds = torch.arange(0, 200)
    first = cache.record_trace(g, seeds, [5, 5], batch_size=50, seed=4)
    assert np.array_equal(first, cache.record_trace(g, seeds, [5, 5], batch_size=50, seed=4))
    assert not np.array_equal(first, cache.record_trace(g, seeds, [5, 5], batch_size=50, seed=5))
    one_batch = cache.record_trace(g, seeds, [5, 5], batch_size=200, seed=4)
    assert len(np.unique(one_batch)) == len(one_batch) and set(seeds.tolist()) <= set(one_batch.tolist())


def test_the_oracle_and_belady_bound_every_policy_on_a_real_trace(cora_trace):
    g, _, trace, presample = cora_trace
    n = g.num_nodes()
    rows = cache.hit_rate_curve(trace, n, [0.01, 0.05, 0.1, 0.3], degrees=cache.graph_degrees(g),
                                presample_counts=presample)
    by = {(r["policy"], r["fraction"]): r["hits"] for r in rows}
    for fraction in (0.01, 0.05, 0.1, 0.3):
        for policy in ("random", "degree", "presample"):
            assert by["oracle", fraction] >= by[policy, fraction], (policy, fraction)
        for policy in cache.POLICIES:
            assert by["belady", fraction] >= by[policy, fraction], (policy, fraction)
        assert by["belady", fraction] > by["lru", fraction]
    assert by["oracle", 0.1] > 2 * by["random", 0.1], "a frequency-ranked cache beats a random one"


def test_a_full_graph_cache_serves_everything():
    trace = np.array([4, 2, 4, 0])
    for policy in ("random", "degree", "oracle", "presample", "belady"):
        result = cache.simulate(trace, policy, 5, 5, degrees=np.arange(5), presample_counts=np.ones(5))
        assert result["hit_rate"] == 1.0, policy


def test_partitioned_cache_counts_only_remote_rows(cora_trace):
    g, train, _, _ = cora_trace
    n = g.num_nodes()
    parts = (np.arange(n) % 2).astype(np.int64)
    train_per_part = [train[parts[train.numpy()] == k] for k in (0, 1)]
    results = {policy: cache.simulate_partitioned_cache(g, parts, train_per_part, [10, 10], 32, policy, 0.1,
                                                        epochs=2, seed=0)
               for policy in ("random", "degree", "presample", "oracle", "belady")}
    degree = results["degree"]
    assert degree["capacity"] == round(0.1 * n)
    assert degree["hits"] + degree["misses"] == degree["remote_accesses"] < degree["accesses"]
    # a random 2-way split leaves about half of the inputs remote (the seeds are local)
    assert 0.3 < degree["remote_accesses"] / degree["accesses"] < 0.6
    assert all(r["remote_accesses"] == degree["remote_accesses"] for r in results.values()), "same traces"
    assert results["random"]["hit_rate"] < results["degree"]["hit_rate"] <= results["oracle"]["hit_rate"]
    assert results["oracle"]["hit_rate"] <= results["belady"]["hit_rate"]
    again = cache.simulate_partitioned_cache(g, parts, train_per_part, [10, 10], 32, "degree", 0.1, epochs=2)
    assert again["hits"] == degree["hits"], "seeded"


def test_bad_input_names_the_problem():
    with pytest.raises(ValueError, match=r"unknown cache policy 'lfu'.*random, degree, presample"):
        cache.simulate(TRACE, "lfu", 2, 4)
    for fraction in (0, -0.1, 1.5):
        with pytest.raises(ValueError, match=r"cache fraction must be in \(0, 1\]"):
            cache.capacity_for(fraction, 100)
    g = load_dataset("cora")
    with pytest.raises(ValueError, match="unknown cache policy"):
        cache.simulate_partitioned_cache(g, np.zeros(g.num_nodes()), [[0]], [5], 8, "mru", 0.1)
    with pytest.raises(ValueError, match=r"cache fraction must be in \(0, 1\]"):
        cache.simulate_partitioned_cache(g, np.zeros(g.num_nodes()), [[0]], [5], 8, "degree", 0.0)
    with pytest.raises(ValueError, match="a partition id per node"):
        cache.simulate_partitioned_cache(g, np.zeros(5), [[0]], [5], 8, "degree", 0.1)
    with pytest.raises(ValueError, match="needs degrees="):
        cache.simulate(TRACE, "degree", 2, 4)
    with pytest.raises(ValueError, match="not a static policy"):
        cache.static_cache("lru", 2, 4)


TRACE_DIGEST = """
import hashlib, sys, torch
from gnnbook.ch5_minibatch import caching as cache
from gnnbook.data import load_dataset
g = load_dataset("powerlaw", num_nodes=100_000, avg_degree=10, seed=0)   # (DGL converts a graph this big in parallel)
trace = cache.record_trace(g, torch.arange(0, 100_000, 20), [10, 10], 256, epochs=1, seed=0)
print(hashlib.sha256(trace.tobytes()).hexdigest())
"""


def test_a_recorded_trace_is_the_same_in_every_process_whatever_its_threads():
    import os
    import subprocess
    import sys

    digests = {}
    for threads in ("1", "2", None):
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
        if threads:
            env["OMP_NUM_THREADS"] = threads
        digests[threads] = subprocess.run([sys.executable, "-c", TRACE_DIGEST], check=True, capture_output=True,
                                          text=True, timeout=300, env=env).stdout.strip()
    assert len(set(digests.values())) == 1, f"processes with OMP_NUM_THREADS 1, 2, unset recorded {digests}"
