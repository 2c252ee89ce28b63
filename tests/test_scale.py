"""The scale graph in the partition cache (issue 24): keyed by its generator's version, its
partitioning's stages shown, built once and then read from the cache."""
from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gnnbook.distributed import partition_cache
from gnnbook.distributed.config import TrainConfig
from gnnbook.distributed.partition_files import load_partition, read_config
from gnnbook.distributed.partition_cache import cache_folder, cached_partition
from gnnbook.distributed.scale_runs import held_share


def test_scale_cache_key_names_the_generator_version(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNBOOK_DATA_DIR", str(tmp_path))
    before = cache_folder("scale", 2, "random", num_nodes=5000)
    monkeypatch.setitem(partition_cache.GENERATOR_VERSIONS, "scale", "scale-v0")
    assert cache_folder("scale", 2, "random", num_nodes=5000) != before, "another generator, another folder"
    assert cache_folder("powerlaw", 2, "random") == tmp_path / "partitions" / "powerlaw-random-2"


def test_scale_partition_shows_its_stages_and_is_built_once(tmp_path, monkeypatch, capsys):
    """The stages are the child's (it generates and partitions), shown by the caller as they start."""
    monkeypatch.setenv("GNNBOOK_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(partition_cache, "LARGE_GRAPH_NODES", 1000)  # a small graph shows the bar too
    config = cached_partition("scale", 2, "metis", num_nodes=5000, avg_degree=8)
    err = capsys.readouterr().err
    for stage in ("generate the scale graph", "self-loops and edge order", "DGL metis into 2 parts",
                  "SHA-256 of the files"):
        assert f"partition scale: {stage}" in err, err
    meta = read_config(config)
    assert meta["num_parts"] == 2 and meta["gnnbook"]["num_features"] == 64
    assert sum(json.loads(config.read_text())["node_map"]["_N"][-1][-1:]) == 5000  # every node placed
    assert cached_partition("scale", 2, "metis", num_nodes=5000, avg_degree=8) == config
    assert "partition scale" not in capsys.readouterr().err, "the second call reads the cache"


def test_held_share_counts_every_byte_once_and_the_halo_on_top(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNBOOK_DATA_DIR", str(tmp_path))
    shares = {}
    for method in ("metis", "random"):
        report = load_partition(cached_partition("scale", 3, method, num_nodes=6000, avg_degree=8))
        shares[method] = held_share(report, num_features=64)
        assert len(shares[method]) == 3 and all(0.3 < s < 0.4 for s in shares[method]), shares
        assert 1.0 < sum(shares[method]) < 1.15, "features once, every edge once, halo ids and self-loops on top"
    assert sum(shares["random"]) > sum(shares["metis"]), "a random partition has the larger halo"


def test_readme_scale_command_as_written():
    """README's one-job example, copied from README and run verbatim: it trains, and every machine's
    measured peak is reported within its budget."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    command = re.search(r"^python -m gnnbook dist-train --dataset scale .*?--json$", readme, re.M | re.S).group(0)
    argv = shlex.split(command.replace("\\\n", " "))
    assert argv[:3] == ["python", "-m", "gnnbook"]
    out = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    assert result["epochs_run"] == 1 and result["test_acc"] > 2 / 16
    assert [m["name"] for m in result["machine_memory"]] == ["machine 0", "machine 1"]
    assert all(0 < m["peak_bytes"] <= m["limit_bytes"] == 2 << 30 for m in result["machine_memory"])


def test_eval_fanouts_round_trip_and_validation():
    config = TrainConfig(eval_fanouts=[25, 25])
    assert TrainConfig.from_argv(config.to_argv()).eval_fanouts == [25, 25]
    assert TrainConfig.from_argv(TrainConfig().to_argv()).eval_fanouts is None  # every neighbour
    with pytest.raises(ValueError, match="one positive count per layer"):
        TrainConfig(eval_fanouts=[25])


def test_bench_scale_pieces_dgl_names_and_each_machines_peak_from_launch(tmp_path, monkeypatch):
    """benchmarks/bench_scale.py's pieces: a partition under DGL's example names (features, labels),
    which the course's trainer reads too, and `launch --machine-memory --json`, which reports every
    machine's measured peak beside the exit codes; a missing DGL example is refused with where to get it."""
    from gnnbook.data import load_dataset
    from gnnbook.distributed.partition_files import open_partition, partition_graph

    monkeypatch.setenv("GNNBOOK_DATA_DIR", str(tmp_path))
    graph = load_dataset("scale", num_nodes=3000, avg_degree=8)
    config = partition_graph(graph, "scale", 2, "random", tmp_path / "parts", feat_name="features", label_name="labels")
    assert {"features", "labels", "train_mask"} <= set(open_partition(config).node_data_names)
    assert read_config(config)["gnnbook"]["num_classes"] == 16
    done = subprocess.run([sys.executable, "-m", "gnnbook", "launch", "--json", "--part-config", str(config),
                           "--machine-memory", "3GiB", "--workdir", str(tmp_path / "w"), "--", sys.executable, "-c",
                           "pass"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert set(result["exit_codes"].values()) == {0}
    assert {"server-m0-s0", "server-m1-s0", "trainer-m0-r0", "trainer-m1-r0"} <= set(result["exit_codes"])
    assert [m["name"] for m in result["machine_memory"]] == ["machine 0", "machine 1"]
    assert all(0 < m["peak_bytes"] <= m["limit_bytes"] == 3 << 30 for m in result["machine_memory"])
    bench = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_scale.py"
    refused = subprocess.run([sys.executable, str(bench), "--dgl-example", str(tmp_path / "none.py")],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1 and "no DGL example at" in refused.stderr and "tag v2.1.0" in refused.stderr


def test_memory_model_separates_node_data_from_structure_and_refuses_one_size():
    from gnnbook.distributed.scale_runs import MachineRun, MemoryModel

    def run(k, method, parts):  # parts: (node data, structure) per machine; peaks from fixed 600 MB, c = 1.5
        return MachineRun(k, method, 10**9, 10**9, [d + s for d, s in parts], [s for _, s in parts],
                          peaks=[int(600e6 + d + 1.5 * s) for d, s in parts])
    fitted = MemoryModel.fit([run(2, "metis", [(50e6, 100e6)] * 2), run(4, "metis", [(25e6, 52e6)] * 4)])
    assert abs(fitted.fixed - 600e6) < 1e3 and abs(fitted.per_structure_byte - 1.5) < 1e-6
    # a random part: the same node data, a larger structure (the halo); predicted from the two costs
    assert abs(fitted.predict(33e6 + 90e6, 90e6) - (600e6 + 33e6 + 1.5 * 90e6)) < 1e3
    with pytest.raises(ValueError, match="two structure sizes"):
        MemoryModel.fit([run(2, "metis", [(50e6, 100e6)] * 2)])
