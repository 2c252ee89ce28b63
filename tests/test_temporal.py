"""Index-batching (gnnbook.applications.temporal) and the traffic loader (gnnbook.data.traffic)."""
import json
import shutil

import pytest
import torch

from gnnbook.data import DatasetError, TRAFFIC_DATASETS, load_traffic
from gnnbook.data.files import REPO_ROOT
from gnnbook.base.launch import run
from gnnbook.applications.temporal import (TGCN, IndexDataset, SnapshotDataset, batch_order, fit, historical_average,
                              split_series, train_distributed)


def _series(steps=40, nodes=5):
    return torch.randn(steps, nodes, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("past, horizon, start, stop", [(12, 12, 0, None), (3, 1, 5, 30), (1, 1, 0, 2), (4, 6, 10, 20)])
def test_every_window_equals_the_materialised_one(past, horizon, start, stop):
    series = _series()
    index, snap = IndexDataset(series, past, horizon, start, stop), SnapshotDataset(series, past, horizon, start, stop)
    assert len(index) == len(snap) == (stop or 40) - start - past - horizon + 1
    for i in range(len(index)):
        s = start + i
        assert (torch.equal(index[i][0], series[s:s + past])
                and torch.equal(index[i][1], series[s + past:s + past + horizon]))
        assert torch.equal(index[i][0], snap[i][0]) and torch.equal(index[i][1], snap[i][1])
    for indices in batch_order(len(index), 2 if len(index) > 1 else 1, epoch=0):
        for a, b in zip(index.batch(indices), snap.batch(indices)):
            assert torch.equal(a, b)
    assert index.nbytes == series.numel() * 4 and snap.nbytes == len(snap) * (past + horizon) * 5 * 4


def test_windows_are_views_not_copies():
    series = _series()
    x, y = IndexDataset(series, 4, 2)[3]
    assert x.data_ptr() == series[3].data_ptr() and y.data_ptr() == series[7].data_ptr()


@pytest.mark.parametrize("kwargs, match", [
    (dict(past=30, horizon=11), "past \\+ horizon = 41"),
    (dict(past=0, horizon=3), "at least 1"),
    (dict(past=3, horizon=3, start=10, stop=5), "start <= stop"),
    (dict(past=3, horizon=3, stop=50), "start <= stop"),
])
def test_bad_windows_are_refused_clearly(kwargs, match):
    with pytest.raises(ValueError, match=match):
        IndexDataset(_series(), **kwargs)


def test_bad_series_and_batch_size_are_refused():
    with pytest.raises(ValueError, match="\\[steps, nodes\\]"):
        IndexDataset(torch.zeros(10), 2, 2)
    with pytest.raises(ValueError, match="batch_size"):
        batch_order(5, 6, epoch=0)
    with pytest.raises(IndexError):
        IndexDataset(_series(), 2, 2)[37]
    import torch.distributed as dist

    with pytest.MonkeyPatch.context() as mp:  # as rank 0 of 2 (a process group of two ranks)
        mp.setattr(dist, "is_initialized", lambda: True)
        mp.setattr(dist, "get_rank", lambda: 0)
        mp.setattr(dist, "get_world_size", lambda: 2)
        with pytest.raises(ValueError, match="multiple"):
            fit(TGCN(torch.eye(5), 4, 2), IndexDataset(_series(), 3, 2), 1, batch_size=3)


def test_los_loop_loads_checked():
    data = load_traffic("los-loop")
    assert tuple(data.speed.shape) == (2016, 207) and data.num_edges == 1313
    assert torch.equal(data.adjacency, data.adjacency.T) and float(data.speed.min()) >= 1
    assert data.graph().num_edges() == 2 * 1313


def test_traffic_loader_refuses_a_corrupt_file_and_says_where_to_put_missing_ones(tmp_path, monkeypatch):
    folder = tmp_path / "los_loop"
    folder.mkdir()
    shared = REPO_ROOT.parent / "shared" / "datasets" / "los_loop"
    shutil.copy(shared / "los_adj.csv", folder / "los_adj.csv")
    (folder / "los_speed.csv").write_bytes((shared / "los_speed.csv").read_bytes()[:-10] + b"9,9,9,9,9\n")
    monkeypatch.setenv("GNNBOOK_DATA_DIR", str(tmp_path))
    with pytest.raises(DatasetError, match="checksum mismatch"):
        load_traffic("los-loop")
    spec = TRAFFIC_DATASETS["los-loop"]
    monkeypatch.setattr("gnnbook.data.files.search_dirs", lambda: [tmp_path / "nowhere"])
    with pytest.raises(DatasetError, match="(?s)not found and downloads are disabled.*los_loop"):
        load_traffic("los-loop", download=False)
    assert spec.url("los_adj.csv").endswith("/T-GCN/T-GCN-PyTorch/data/los_adj.csv")
    with pytest.raises(DatasetError, match="Did you mean 'los-loop'"):
        load_traffic("los_lop")


def test_split_and_baseline():
    speed = torch.arange(100.0).reshape(50, 2)
    split = split_series(speed, 5, 5)
    assert split.train_stop == 40 and abs(float(split.series[:40].mean())) < 1e-5
    with pytest.raises(ValueError, match="past \\+ horizon"):
        split_series(speed, 30, 30)
    test = IndexDataset(split.series, 5, 5, split.train_stop - 5)
    # a ramp rising 2 per step: the window mean (step s + 2) lags future step s + 5 + k by 3 + k steps,
    # k = 0..4, so the mean error is 2 * (3 + 2)
    assert historical_average(test, split)["mae"] == pytest.approx(10.0, rel=1e-4)


@pytest.mark.timeout(300)
def test_distributed_index_batching_equals_one_process():
    args = dict(hidden=4, epochs=1, batch_size=16, max_batches=3, seed=1)
    ranks = run("gnnbook.applications.temporal:train_distributed", 2, args, deadline_s=240)
    single = train_distributed(**args)
    assert [r.rank for r in ranks] == [0, 1]
    for r in ranks:
        assert r.series_bytes == 2016 * 207 * 4, "each rank holds the series once"
        assert r.losses == pytest.approx(single.losses, rel=1e-4)
        for p, q in zip(r.params, single.params):
            assert torch.allclose(p, q, atol=1e-5)


def test_python_m_gnnbook_datasets_lists_los_loop(capsys):
    from gnnbook.cli import datasets_markdown, main

    assert main(["datasets", "--json", "--offline"]) == 0
    rows = {r["dataset"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["los-loop"] == {"dataset": "los-loop", "steps": 2016, "nodes": 207, "edges": 1313}
    assert "cora" in rows
    assert "| los-loop | `los_loop/los_speed.csv` |" in datasets_markdown()
