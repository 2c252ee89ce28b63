"""The scale graph in the partition cache (issue 24): keyed by its generator's version, its
partitioning's stages shown, built once and then read from the cache."""
from __future__ import annotations

import json

from gnnbook.distributed import partition_files
from gnnbook.distributed.partition_files import cache_folder, cached_partition, read_config


def test_scale_cache_key_names_the_generator_version(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNBOOK_DATA_DIR", str(tmp_path))
    before = cache_folder("scale", 2, "random", num_nodes=5000)
    monkeypatch.setitem(partition_files.GENERATOR_VERSIONS, "scale", "scale-v0")
    assert cache_folder("scale", 2, "random", num_nodes=5000) != before, "another generator, another folder"
    assert cache_folder("powerlaw", 2, "random") == tmp_path / "partitions" / "powerlaw-random-2"


def test_scale_partition_shows_its_stages_and_is_built_once(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GNNBOOK_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(partition_files, "LARGE_GRAPH_NODES", 1000)  # a small graph shows the bar too
    config = cached_partition("scale", 2, "metis", num_nodes=5000, avg_degree=8)
    err = capsys.readouterr().err
    assert err.startswith("scale graph: 5,000 nodes, at most 40,000 directed edges")
    for stage in ("self-loops and edge order", "DGL metis into 2 parts", "SHA-256 of the files"):
        assert f"partition scale: {stage}" in err
    meta = read_config(config)
    assert meta["num_parts"] == 2 and meta["gnnbook"]["num_features"] == 64
    assert sum(json.loads(config.read_text())["node_map"]["_N"][-1][-1:]) == 5000  # every node placed
    assert cached_partition("scale", 2, "metis", num_nodes=5000, avg_degree=8) == config
    assert "scale graph" not in capsys.readouterr().err, "the second call reads the cache"
