"""The command line, run as a user runs it: ``python -m gnnbook ...``."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gnnbook.cli import datasets_markdown
from gnnbook.base.env import check_pins, course_requirements

ROOT = Path(__file__).resolve().parents[1]


def gnnbook(*args: str, timeout: float = 280) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gnnbook", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def test_env_passes_in_the_course_environment():
    run = gnnbook("env")
    assert run.returncode == 0, run.stderr
    assert "dgl         2.1.0" in run.stdout and "All pins satisfied" in run.stdout


def test_pin_check_flags_torch_beside_dgl():
    reqs = course_requirements()
    assert "torch==2.2.1" in reqs and "dgl==2.1.0" in reqs
    problems = check_pins({"torch": "2.3.0", "dgl": "2.1.0", "numpy": "2.0.1"},
                          ["torch==2.2.1", "dgl==2.1.0", "numpy<2"])
    assert [p.name for p in problems] == ["torch", "numpy"]
    assert "DGL 2.1.0 supports torch 2.0.0-2.2.1 only" in problems[0].message()
    assert check_pins({"torch": "2.2.1+cu121"}, ["torch==2.2.1"]) == [], "local build labels are fine"
    assert "not installed" in check_pins({}, ["dgl==2.1.0"])[0].message()


def test_unknown_dataset_is_one_paragraph_without_traceback():
    run = gnnbook("train", "--dataset", "nosuch")
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    assert "unknown dataset 'nosuch'" in run.stderr and "cora, citeseer, amazon-photo" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


def test_unknown_model_and_bad_seeds():
    run = gnnbook("train", "--model", "transformer")
    assert run.returncode == 2 and "invalid choice: 'transformer'" in run.stderr and "Traceback" not in run.stderr
    assert "'gcn', 'gat'" in run.stderr, "argparse names the models (--model's choices)"
    run = gnnbook("train", "--seeds", "0")
    assert run.returncode == 2 and "--seeds must be at least 1" in run.stderr


def test_datasets_table_and_json():
    run = gnnbook("datasets", "--json")
    rows = {r["dataset"]: r for r in json.loads(run.stdout)}
    assert rows["cora"]["nodes"] == 2708 and rows["coauthor-cs"]["features"] == 6805
    assert "cora" in gnnbook("datasets").stdout


def test_data_readme_matches_the_registry():
    readme = (ROOT / "data" / "README.md").read_text()
    assert datasets_markdown() in readme, "regenerate with: python -m gnnbook datasets --markdown"


def test_train_json_record_and_readable_summary():
    run = gnnbook("train", "--dataset", "cora", "--model", "gcn", "--seeds", "2", "--epochs", "40", "--json",
                  "--no-progress")
    assert run.returncode == 0, run.stderr
    record = json.loads(run.stdout)
    assert {"test_acc_mean", "test_acc_std", "seconds_per_epoch", "peak_memory_bytes"} <= set(record)
    assert record["seeds"] == [0, 1] and 0.5 < record["test_acc_mean"] <= 1
    text = gnnbook("train", "--dataset", "cora", "--seeds", "1", "--epochs", "5", "--no-progress").stdout
    assert text.startswith("gcn on cora, 1 seed(s): test accuracy")


# GAT on Cora and GCN on CiteSeer over five seeds, through the same train_over_seeds, are asserted by chapter 2's
# run in tests/test_papermill.py (seeds=5: every reproduction within max(1 point, 3 standard errors) of the paper).
@pytest.mark.parametrize("dataset, model, floor", [("cora", "gcn", 0.805)])
def test_reproduces_the_papers_over_five_seeds(dataset, model, floor):
    """The CLI's defaults reproduce the paper: GCN on Cora 81.5, at most ~1 point below."""
    run = gnnbook("train", "--dataset", dataset, "--model", model, "--seeds", "5", "--json", "--no-progress")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["test_acc_mean"] >= floor


def test_train_on_cuda_without_dgl_cuda_stops_at_once_with_the_fix():
    """PyPI's DGL 2.1.0 is CPU-only: --device cuda stops before loading anything, saying how to get DGL's CUDA build."""
    import torch

    from gnnbook.base.env import DGL_CUDA_INSTALL, check_device, dgl_has_cuda

    if torch.cuda.is_available() and dgl_has_cuda():
        pytest.skip("this machine has a GPU and DGL's CUDA build: --device cuda works")
    run = gnnbook("train", "--dataset", "cora", "--device", "cuda", "--no-progress", timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    message = run.stderr
    assert "PyPI's dgl 2.1.0" in message and "CPU-only" in message
    assert DGL_CUDA_INSTALL in message and "https://data.dgl.ai/wheels/torch-2.2/cu121/repo.html" in message
    assert "lab12_feature_loading" in message and "--device cpu" in message
    assert "test accuracy" not in run.stdout, "nothing was trained"
    assert check_device("cpu") == "cpu"
    with pytest.raises(Exception, match="unknown device 'tpu'"):
        check_device("tpu")


def test_fetch_finds_and_verifies_every_shipped_dataset_offline(monkeypatch, capsys):
    """`datasets --fetch` with GNNBOOK_DATA_DIR at the shared copies: every file found there, every SHA-256 checked,
    no network (a download attempt fails the test)."""
    from gnnbook.cli import main
    from gnnbook.data import DATASETS, RATINGS_DATASETS, TRAFFIC_DATASETS
    from gnnbook.data import files

    shared = ROOT.parent / "shared" / "datasets"
    if not shared.is_dir():
        pytest.skip("no ../shared/datasets here")

    def no_network(url, dest, sha):
        raise AssertionError(f"tried to download {url}")

    monkeypatch.setattr(files, "_download", no_network)
    monkeypatch.setenv("GNNBOOK_DATA_DIR", str(shared))
    assert main(["datasets", "--fetch"]) == 0
    out = capsys.readouterr().out
    every = {**DATASETS, **TRAFFIC_DATASETS, **RATINGS_DATASETS}
    for name, spec in every.items():
        line = next(line for line in out.splitlines() if line.startswith(name + " "))
        assert f"{len(spec.files)} file(s)" in line and "SHA-256 ok" in line and str(shared) in line, line
    assert "Every shipped dataset is present and verified" in out


def test_fetch_reports_a_file_that_is_not_the_pinned_one(tmp_path, monkeypatch, capsys):
    from gnnbook.cli import main

    bad = tmp_path / "cora" / "ind.cora.x"
    bad.parent.mkdir()
    bad.write_bytes(b"not the pinned file")
    monkeypatch.setenv("GNNBOOK_DATA_DIR", str(tmp_path))
    assert main(["datasets", "--fetch", "--offline"]) == 1
    captured = capsys.readouterr()
    assert "cora" in captured.out and "CHECKSUM MISMATCH" in captured.out
    assert str(bad) in captured.err and "delete them" in captured.err
