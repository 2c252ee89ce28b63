"""Partitioning runs in a supervised child (issue 44): a deadline that names the stage, a killed child
that leaves nothing half-written, and the advertised scale-up of chapter 8b partitioned inside a real
Jupyter kernel, which stays usable after a failed build."""
from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest

from gnnbook.distributed.partition_cache import (PROGRESS_ENV, PartitionFailed, cache_folder, graph_size,
                                                 partition_dataset, partition_deadline_s)
from gnnbook.distributed.partition_files import PartitionError, open_partition

# Chapter 8b's graph (its parameters cell) at the default size.
SCALE_8B = dict(num_nodes=300_000, avg_degree=20, train_fraction=0.05, val_fraction=0.025, test_fraction=0.05, seed=0)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_a_build_is_refused_before_any_process_starts(tmp_path):
    with pytest.raises(Exception, match="unknown dataset 'cor'. Did you mean 'cora'"):
        partition_dataset("cor", 2, "metis", tmp_path / "p")
    with pytest.raises(TypeError, match="num_nodez"):
        partition_dataset("scale", 2, "metis", tmp_path / "p", num_nodez=10)
    with pytest.raises(PartitionError, match="unknown partition method"):
        partition_dataset("cora", 2, "spectral", tmp_path / "p")
    assert leftovers(tmp_path) == []


def test_the_deadline_grows_with_the_graph():
    assert graph_size("cora", {}) is None
    assert graph_size("powerlaw", {}) == (10_000, 100_000)  # the generator's defaults
    small, large = partition_deadline_s("cora", {}), partition_deadline_s("scale", dict(num_nodes=2_000_000))
    assert small < partition_deadline_s("scale", SCALE_8B) < large


def test_a_build_past_its_deadline_stops_with_a_named_error(tmp_path):
    out = tmp_path / "parts" / "scale3"
    start = time.monotonic()
    with pytest.raises(PartitionFailed) as failed:
        partition_dataset("scale", 3, "metis", out, deadline_s=3, **SCALE_8B)
    took = time.monotonic() - start
    message = str(failed.value)
    assert "partitioning scale (300,000 nodes, 6,000,000 edges) into 3 parts (metis)" in message, message
    assert "did not finish within its deadline of 3 s" in message and "in stage '" in message, message
    assert took < 3 + 20, f"stopped {took:.0f} s after it started, deadline 3 s"
    assert failed.value.returncode is None and any(failed.value.log_dir.glob("*.log")), "the child's log is kept"
    shutil.rmtree(failed.value.log_dir)     # kept for a user; the test leaves nothing in /tmp
    assert leftovers(out.parent) == [], "no half-written partition, no temporary folder"


def _kill_child_in_metis(seen: dict) -> None:
    """SIGKILL the build's child once it reports the METIS stage."""
    end = time.monotonic() + 120
    while time.monotonic() < end:
        for child in psutil.Process().children(recursive=True):
            try:
                progress = child.environ().get(PROGRESS_ENV)
            except (psutil.Error, OSError):
                continue
            if progress and os.path.exists(progress) and "DGL metis" in Path(progress).read_text():
                seen["pid"] = child.pid
                os.kill(child.pid, signal.SIGKILL)
                return
        time.sleep(0.05)


def test_a_killed_build_names_its_stage_and_leaves_the_cache_empty(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNBOOK_DATA_DIR", str(tmp_path))
    seen: dict = {}
    killer = threading.Thread(target=_kill_child_in_metis, args=(seen,), daemon=True)
    killer.start()
    from gnnbook.distributed.partition_cache import open_cached_partition

    with pytest.raises(PartitionFailed, match="failed in stage 'DGL metis into 3 parts': the child process killed "
                                              "by SIGKILL") as failed:
        open_cached_partition("scale", 3, "metis", **SCALE_8B)
    killer.join()
    assert seen, "the child was killed in METIS"
    assert failed.value.stage == "DGL metis into 3 parts"
    shutil.rmtree(failed.value.log_dir)     # kept for a user; the test leaves nothing in /tmp
    folder = cache_folder("scale", 3, "metis", **SCALE_8B)
    assert leftovers(folder.parent) == [], "the cache holds no entry, whole or partial"


KERNEL_CELLS = [
    # 8b's scale-up partitions (predict_methods = ["metis", "random"]: METIS at K = 3) in the kernel's cell
    ("from gnnbook.distributed.partition_cache import open_cached_partition, partition_dataset\n"
     f"opened = open_cached_partition('scale', 3, 'metis', **{SCALE_8B!r})\n"
     "print(opened.num_parts, opened.train_nodes)", "3 15000"),
    # a build that cannot finish in time: an error in the cell, and the kernel carries on
    (f"try:\n    partition_dataset('scale', 2, 'metis', OUT, deadline_s=2, **{SCALE_8B!r})\n"
     "except Exception as err:\n    import shutil\n    shutil.rmtree(err.log_dir)\n"
     "    print(type(err).__name__, 'deadline of 2 s' in str(err))", "PartitionFailed True"),
    ("print(1 + 1)", "2"),
]


def test_8b_scale_up_partitions_inside_a_kernel_which_survives_a_failed_build(tmp_path, monkeypatch):
    from jupyter_client.manager import KernelManager

    monkeypatch.setenv("GNNBOOK_DATA_DIR", str(tmp_path))

    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(env={**os.environ}, cwd=str(tmp_path))
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        output: list[str] = []

        def keep_stream(msg: dict) -> None:
            if msg["msg_type"] == "stream":
                output.append(msg["content"]["text"])

        for code, expected in KERNEL_CELLS:
            output.clear()
            reply = client.execute_interactive(code.replace("OUT", repr(str(tmp_path / "out"))), timeout=240,
                                               output_hook=keep_stream)
            assert reply["content"]["status"] == "ok", reply["content"]
            assert expected in "".join(output), (code, output)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    built = cache_folder("scale", 3, "metis", **SCALE_8B)
    assert open_partition(built / "scale.json").num_parts == 3
    assert not (tmp_path / "out").exists() and leftovers(built.parent) == [built.name]
