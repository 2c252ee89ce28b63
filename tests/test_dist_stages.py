"""The distributed trainer's measurements: the stage breakdown of a step, the
sampled neighbours on other machines, and the cache of remote feature rows
(policies, exact rows, counts per epoch), in real DistDGL jobs; the rows and
bytes fetched from other machines are checked against what the graph servers
served (counted in DGL's kvstore, not by the trainer)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from gnnbook.distributed.cluster import LocalCluster
from gnnbook.distributed.config import TrainConfig, check_cache_options
from gnnbook.distributed.feature_cache import (FeatureCache, cache_capacity, presample_counts,
                                               remote_candidates, select_cached_nodes)
from gnnbook.distributed.partition_cache import partition_dataset
from gnnbook.distributed.stages import STAGES


@pytest.fixture(scope="module")
def cora_random2(tmp_path_factory) -> Path:
    return partition_dataset("cora", 2, "random", tmp_path_factory.mktemp("stages") / "cora2")


def test_selection_is_highest_score_first_ties_by_lower_id():
    candidates = torch.tensor([9, 2, 7, 4, 5])
    scores = torch.tensor([3, 1, 3, 8, 1])
    assert select_cached_nodes(candidates, scores, 3).tolist() == [4, 7, 9]
    assert select_cached_nodes(candidates, scores, 10).tolist() == [4, 7, 9, 2, 5]
    assert select_cached_nodes(candidates, scores, 0).tolist() == []
    assert cache_capacity(0.1, 7650) == 765


def test_cache_rows_equal_the_source_rows_exactly():
    """Random ids, a third of the nodes remote and cached: every fetched row is
    the source's row bit for bit, and the counts add up."""
    torch.manual_seed(0)
    feats = torch.randn(300, 7)
    parts = torch.randint(0, 3, (300,))
    owner = lambda ids: parts[ids]  # noqa: E731
    remote = remote_candidates(owner, 1, 300)
    cache = FeatureCache(feats, owner, 1, remote[::2], 300)
    total = dict(local_rows=0, hits=0, misses=0, remote_bytes=0)
    for _ in range(20):
        ids = torch.randperm(300)[:50]
        assert torch.equal(cache.fetch(ids), feats[ids])
        expected_remote = int((parts[ids] != 1).sum())
        counts = cache.take_counts()
        assert counts["local_rows"] == 50 - expected_remote
        assert counts["hits"] + counts["misses"] == expected_remote
        assert counts["hits"] == int(torch.isin(ids, remote[::2]).sum())
        assert counts["remote_bytes"] == counts["misses"] * 7 * 4
        total = {k: total[k] + counts[k] for k in total}
    assert 0 < total["hits"] < total["hits"] + total["misses"]
    with pytest.raises(ValueError, match="other partitions only"):
        FeatureCache(feats, owner, 1, torch.nonzero(parts == 1)[:3, 0], 300)


def test_presample_counts_unique_input_nodes_per_minibatch():
    batches = [(torch.tensor([0, 3, 4]), None, None), (torch.tensor([3, 1]), None, None)]
    assert presample_counts(batches, 6).tolist() == [1, 1, 0, 2, 1, 0]


@pytest.mark.parametrize("policy, fraction, words", [
    ("lru", 0.1, ["unknown cache policy 'lru'", "none, degree, presample"]),
    ("degree", 0.0, ["cache fraction 0.0 is outside (0, 1]"]),
    ("presample", 1.5, ["cache fraction 1.5 is outside (0, 1]"]),
])
def test_bad_cache_options_are_refused(policy, fraction, words, capsys):
    with pytest.raises(ValueError) as err:
        check_cache_options(policy, fraction)
    assert all(w in str(err.value) for w in words)
    with pytest.raises(ValueError):
        TrainConfig(cache_policy=policy, cache_fraction=fraction)
    from gnnbook.cli import main

    assert main(["dist-train", "--dataset", "cora", "--cache-policy", policy, "--cache-fraction", str(fraction),
                 "--dry-run"]) == 2
    err_text = capsys.readouterr().err
    assert all(w in err_text for w in words) and "Traceback" not in err_text


# Runs the gnnbook trainer in every process of a job.  In a graph server it first counts, on
# DGL's kvstore side, every pull it serves (PullRequest.process_request: the tensor's name, the
# rows and bytes of the reply), one line per request in $SERVED_DIR; in a trainer it leaves the
# evaluation out, so that every feature row a server serves is one the trainer fetched for its
# cache or its minibatches.
SERVED_SHIM = textwrap.dedent("""
    import os, sys
    if os.environ.get("DGL_ROLE") == "server":
        import dgl.distributed.kvstore as kvstore
        serve = kvstore.PullRequest.process_request
        log = open(os.path.join(os.environ["SERVED_DIR"], f"server-{os.getpid()}.txt"), "a", buffering=1)

        def counted(self, server_state):
            reply = serve(self, server_state)
            data = reply.data_tensor
            log.write(f"{self.name} {data.shape[0]} {data.nelement() * data.element_size()}\\n")
            return reply

        kvstore.PullRequest.process_request = counted
    import gnnbook.distributed.trainer as trainer
    if os.environ.get("DGL_ROLE") != "server":
        trainer._evaluate = lambda *args: (0, 0)
    sys.exit(trainer._main_or_clear_error())
""")


def served(folder: Path, tensor: str) -> tuple[int, int, int]:
    """(requests, rows, bytes) the servers served from the node data ``tensor``."""
    lines = [line.split() for f in folder.glob("server-*.txt") for line in f.read_text().splitlines()]
    mine = [(int(rows), int(size)) for name, rows, size in lines if name.split("~")[-1] == tensor]
    return len(mine), sum(r for r, _ in mine), sum(b for _, b in mine)


def test_stage_times_add_up_and_cached_rows_are_the_servers(cora_random2, tmp_path, monkeypatch):
    """A real job (2 machines x 1 trainer, random partitions, presample cache,
    every row also fetched from the servers): stage times add up to the step
    time within 10% for every trainer and epoch; no row differs; and the rows
    and bytes the trainers report fetching from other machines are those the
    graph servers served, counted on DGL's kvstore side."""
    config = TrainConfig(epochs=2, cache_policy="presample", cache_fraction=0.1, verify_cache=True,
                         out=str(tmp_path / "result.json"))
    shim, counts = tmp_path / "served_shim.py", tmp_path / "served"
    shim.write_text(SERVED_SHIM)
    counts.mkdir()
    with LocalCluster(cora_random2, num_trainers=1, deadline_s=240, workdir=tmp_path / "w") as cluster:
        command = [sys.executable, str(shim), "--part-config", str(cora_random2), *config.to_argv()]
        monkeypatch.setenv("SERVED_DIR", str(counts))  # every process of the job inherits it
        cluster.run(command)
    result = json.loads((tmp_path / "result.json").read_text())
    per_epoch, cache = result["per_epoch"], result["cache"]
    for epoch in range(2):
        for rank in range(2):
            stages = [per_epoch["stage_seconds"][s][epoch][rank] for s in STAGES]
            step = per_epoch["step_seconds"][epoch][rank]
            assert all(t > 0 for t in stages), dict(zip(STAGES, stages))
            assert abs(sum(stages) - step) <= 0.1 * step, (sum(stages), step)
            assert per_epoch["step_seconds"][epoch][rank] <= result["history"][epoch]["seconds"]
    assert cache["rows_per_trainer"] == [cache_capacity(0.1, 2708)] * 2
    assert cache["mismatched_rows"] == 0  # every minibatch's rows and every cached row, compared exactly
    assert cache["hits"] > 0 and cache["misses"] > 0
    # What the servers served from 'feat', per trainer: its cache's rows (filled once), every miss, and
    # (--verify-cache) the cached rows again and every remote row of every minibatch (hits and misses).
    fill = sum(cache["rows_per_trainer"])
    requests, rows, size = served(counts, "feat")
    assert requests > 0
    assert rows == fill + cache["misses"] + fill + cache["hits"] + cache["misses"], (rows, cache)
    remote_bytes = sum(map(sum, per_epoch["remote_bytes"]))
    assert size == 2 * sum(cache["fill_bytes_per_trainer"]) + remote_bytes + cache["hits"] * cache["row_bytes"] \
        + remote_bytes
    assert size == rows * 1433 * 4  # float32 rows of Cora's 1433 features, as served
    # Random partitions of 2: a sampled neighbour is on another machine than its sampler about half the time.
    assert 0.4 < result["remote_neighbour_fraction"] < 0.6
    assert result["trainer_remote_neighbour_fraction"] < result["remote_neighbour_fraction"]


def dist_train_json(*extra: str, timeout: float = 400) -> dict:
    done = subprocess.run([sys.executable, "-m", "gnnbook", "dist-train", "--dataset", "amazon-photo", "--num-parts",
                           "2", "--method", "random", *extra, "--json"], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ})
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)


def test_dist_train_cache_acceptance():
    """The acceptance command (3 epochs, no single-process baseline, to stay
    short): hit and miss counts and remote bytes per epoch, and remote bytes
    well below those of the same job without a cache."""
    short = ("--epochs", "3", "--no-baseline")
    cached = dist_train_json("--cache-policy", "presample", "--cache-fraction", "0.1", *short)
    plain = dist_train_json("--cache-policy", "none", *short)
    row_bytes = 745 * 4
    for result in (cached, plain):
        per_epoch = result["per_epoch"]
        assert len(per_epoch["remote_bytes"]) == 3 and all(len(e) == 2 for e in per_epoch["remote_bytes"])
        assert per_epoch["remote_bytes"] == [[m * row_bytes for m in e] for e in per_epoch["remote_rows"]]
    assert cached["cache"]["rows_per_trainer"] == [765, 765] and plain["cache"]["rows_per_trainer"] == [0, 0]
    assert all(sum(e) > 0 for e in cached["per_epoch"]["cache_hits"])
    assert plain["cache"]["hits"] == 0
    per_epoch_bytes = [[sum(e) for e in r["per_epoch"]["remote_bytes"]] for r in (cached, plain)]
    assert max(per_epoch_bytes[0]) < 0.8 * min(per_epoch_bytes[1]), per_epoch_bytes
    # Both fetch the same kind of minibatches: remote accesses per epoch within 15% of each other.
    accesses = [sum(map(sum, r["per_epoch"]["remote_rows"])) + r["cache"]["hits"] for r in (cached, plain)]
    assert abs(accesses[0] - accesses[1]) <= 0.15 * accesses[1], accesses
    assert 0 < cached["cache"]["hit_rate"] < 1


def test_repeatable_sampling_trains_the_same_model_with_and_without_a_cache(cora_random2):
    """With the servers seeded every epoch (2 machines x 1 trainer), a job with a presample cache
    (whose presampling pass has a loader of its own) and one without draw the same minibatches and
    neighbours: identical losses and accuracies, so the cache changed nothing but where rows came from.
    The cached job also counts no remote neighbours (--no-neighbour-stats): that changes nothing either,
    and its result says the fractions were not measured rather than reporting zero."""
    runs = {}
    for policy in ("none", "presample"):
        config = TrainConfig(epochs=2, cache_policy=policy, repeatable_sampling=True,
                             neighbour_stats=policy == "none")
        with LocalCluster(cora_random2, num_trainers=1, deadline_s=240) as cluster:
            runs[policy] = cluster.train(config)
    plain, cached = runs["none"]["history"], runs["presample"]["history"]
    assert [h["loss"] for h in plain] == [h["loss"] for h in cached]
    assert [h["test_acc"] for h in plain] == [h["test_acc"] for h in cached]
    assert runs["presample"]["cache"]["hits"] > 0
    assert runs["presample"]["remote_neighbour_fraction"] is None
    assert 0 < runs["none"]["remote_neighbour_fraction"] < 1


def test_repeatable_sampling_refuses_layouts_it_cannot_repeat(cora_random2):
    with LocalCluster(cora_random2, num_trainers=2, deadline_s=60) as cluster:
        with pytest.raises(ValueError, match="2 machines with 1 trainer each"):
            cluster.train(TrainConfig(epochs=1, repeatable_sampling=True))


def test_remote_neighbours_counted_per_node_equal_the_per_edge_definition():
    """count_remote_neighbours looks owners up once per node of a block; the counts are those of the
    definition, edge by edge (self-loops left out), on sampled blocks of a graph with self-loops."""
    import dgl

    from gnnbook.distributed.stages import count_remote_neighbours

    torch.manual_seed(0)
    g = dgl.add_self_loop(dgl.rand_graph(400, 3000))
    _, _, blocks = dgl.dataloading.NeighborSampler([5, 10]).sample_blocks(g, torch.arange(0, 400, 7))
    owner_of = lambda ids: ids % 3  # noqa: E731
    expected = [0, 0, 0]
    for block in blocks:
        src, dst = block.edges()
        src, dst = block.srcdata[dgl.NID][src], block.dstdata[dgl.NID][dst]
        keep = src != dst
        expected[0] += int(keep.sum())
        expected[1] += int((owner_of(src[keep]) != owner_of(dst[keep])).sum())
        expected[2] += int((owner_of(src[keep]) != 1).sum())
    assert expected[0] > 0 and 0 < expected[2] < expected[0]
    assert list(count_remote_neighbours(blocks, owner_of, own_part=1)) == expected


def test_owner_lookup_agrees_with_the_partition_book(cora_random2):
    """The trainer's cheap owner lookup (partition starts compared) gives what DGL's partition book gives,
    for every node, on a real partitioning; an unsorted or gapped book keeps the book's own lookup."""
    import dgl

    from gnnbook.distributed.stages import owner_lookup

    book = dgl.distributed.load_partition_book(str(cora_random2), 0)[0]
    ids = torch.arange(2708)
    assert owner_lookup(book)(ids).tolist() == book.nid2partid(ids).tolist()

    class Gapped:
        num_partitions = lambda self: 2  # noqa: E731
        partid2nids = lambda self, p: torch.tensor([0, 2]) if p == 0 else torch.tensor([1, 3])  # noqa: E731
        nid2partid = lambda self, ids: ids % 2  # noqa: E731

    gapped = Gapped()
    assert owner_lookup(gapped) == gapped.nid2partid
