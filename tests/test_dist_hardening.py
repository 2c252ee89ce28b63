"""The runtime's second pass (issue 22): each test here failed before its fix.

Items: 1 (`launch` without --deadline, its failed job's logs kept), 3 (no shell
injection through placeholders or the partition's graph name; the config
itself under a digest), 4 (the partition
cache key), 5 (checkpoint temporary files), 7 (host files: duplicate
addresses, machine ids), 6 (repeatable sampling's layouts), 8 (preflight on every
local start, -X/-W, a script's #! line and env), 10 (resume with no epochs left).  Only the `launch` tests
start a job (a few seconds each).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gnnbook.distributed import emulation
from gnnbook.distributed.checkpoint import CHECKPOINT, CheckpointError, identity, resume_state, save_checkpoint
from gnnbook.distributed.cluster import LocalCluster
from gnnbook.distributed.config import TrainConfig
from gnnbook.distributed.launcher import LaunchError, plan_job, read_host_file
from gnnbook.distributed.partition_files import PartitionError, read_config
from gnnbook.distributed.partition_cache import cache_folder, partition_dataset


@pytest.fixture(scope="module")
def cora2(tmp_path_factory) -> Path:
    return partition_dataset("cora", 2, "random", tmp_path_factory.mktemp("hardening") / "cora2")


def gnnbook_cli(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gnnbook", *argv], capture_output=True, text=True, timeout=timeout)


# --- item 1: `launch` as README writes it, no --deadline

def test_launch_runs_without_a_deadline_option(cora2):
    done = gnnbook_cli("launch", "--part-config", str(cora2), "--", sys.executable, "-c", "pass")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "trainer-m0-r0: exit 0" in done.stdout and "trainer-m1-r0: exit 0" in done.stdout


def test_the_interfaces_demo_runs_as_chapter_8_writes_it(cora2, tmp_path):
    """Chapter 8.3.2's shell command, as written: `launch` then the demo module, whose rank 0 writes what every
    trainer saw (the notebook itself reads the same records from its training job)."""
    out = tmp_path / "seen.json"
    done = gnnbook_cli("launch", "--part-config", str(cora2), "--", sys.executable, "-m",
                       "gnnbook.distributed.demo_interfaces", "--part-config", str(cora2), "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(out.read_text())
    assert len(seen) == 2 and not out.with_suffix(".part").exists()   # one record per trainer, written whole
    for record in seen:
        assert record["owner_mark_matches_partition_book"], record
        assert sorted(record["owner_mark_counts"]) == ["1", "2"]   # each machine marked the nodes it owns
        assert record["kv_pulled"] and len(record["kv_pulled"]) == len(record["kv_pushed_ids"])


def test_a_failed_launch_keeps_the_logs_it_points_to(cora2):
    done = gnnbook_cli("launch", "--part-config", str(cora2), "--", sys.executable, "-c",
                       "import os, sys; print('trainer says hello', flush=True); "
                       "sys.exit(3 if os.environ['DGL_ROLE'] == 'client' else 0)")
    assert done.returncode == 1 and "exit" in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
    logs = Path(re.search(r"all logs: (\S+?)\)", done.stderr).group(1))
    try:
        assert logs.is_dir() and any("trainer says hello" in f.read_text() for f in logs.iterdir())
    finally:
        shutil.rmtree(logs.parents[1], ignore_errors=True)  # the gnnbook-cluster-* folder kept for the user


# --- item 3: placeholders are filled before quoting; names from partition files are plain

def test_placeholders_cannot_break_out_of_the_remote_shell_command(cora2, tmp_path):
    workdir = tmp_path / "it's here;touch pwned"
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("10.1.0.11\n10.1.0.12\n")
    command = ["python3", "train.py", "--workdir", "{workdir}", "--graph", "{graph_name}"]
    plan = plan_job(cora2, command, mode="cluster", hosts=read_host_file(hosts), workdir=workdir)
    for p in plan.processes:
        words = shlex.split(p.full_argv[-1])  # what the remote shell runs
        assert words[-5:] == ["train.py", "--workdir", str(workdir), "--graph", "cora"]
        assert "touch" not in words


def test_a_graph_name_that_is_not_a_plain_name_is_refused(cora2, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(cora2.parent, copy)
    config = json.loads((copy / cora2.name).read_text())
    config["graph_name"] = "x';touch pwned;'"
    (copy / cora2.name).write_text(json.dumps(config))
    with pytest.raises(PartitionError, match="graph_name .* is not a plain name"):
        read_config(copy / cora2.name)


def test_a_config_edited_after_partitioning_is_refused(cora2, tmp_path):
    """The config itself is covered by a digest, not only the files it lists."""
    copy = tmp_path / "copy"
    shutil.copytree(cora2.parent, copy)
    path = copy / cora2.name
    config = json.loads(path.read_text())
    path.write_text(json.dumps(config, indent=4))  # only re-indented: still the config gnnbook wrote
    assert read_config(path)["graph_name"] == "cora"
    config["gnnbook"]["num_classes"] = 3  # an edit that leaves every file intact
    path.write_text(json.dumps(config))
    with pytest.raises(PartitionError, match="was edited after partitioning.*partition the dataset again"):
        read_config(path)
    del config["gnnbook"]["config_sha256"]  # and one that removes the digest as well
    path.write_text(json.dumps(config))
    with pytest.raises(PartitionError, match="records no digest of the config itself"):
        read_config(path)


# --- item 4: the partition cache key

def test_cache_keys_of_distinct_options_differ_and_stay_in_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNBOOK_DATA_DIR", str(tmp_path))
    assert cache_folder("powerlaw", 2, "random", a=11) != cache_folder("powerlaw", 2, "random", a1=1)
    escape = cache_folder("powerlaw", 2, "random", name="/../../x")
    assert escape.parent == tmp_path / "partitions" and "/" not in escape.name and ".." not in escape.name
    with pytest.raises(PartitionError, match="unknown partition method"):
        cache_folder("powerlaw", 2, "../../x")


# --- item 5: checkpoints go through an exclusive temporary file of their own

def test_checkpoint_never_writes_through_a_planted_file(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / f".{CHECKPOINT}.{os.getpid()}").symlink_to(victim)  # the name the old code wrote to
    save_checkpoint(folder, dict(epoch=0))
    assert victim.read_text() == "keep me" and torch.load(folder / CHECKPOINT, weights_only=True) == dict(epoch=0)
    assert sorted(p.name for p in folder.iterdir()) == sorted([CHECKPOINT, f".{CHECKPOINT}.{os.getpid()}"])


# --- item 7: host files

def test_a_host_file_naming_one_address_and_port_twice_is_refused(cora2, tmp_path):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("10.1.0.11 30050\n10.1.0.11\n")
    with pytest.raises(LaunchError, match="10.1.0.11 port 30050 for machines 0 and 1"):
        plan_job(cora2, ["python3", "x.py"], mode="cluster", hosts=read_host_file(hosts), workdir=tmp_path / "j")


def test_cluster_processes_are_told_their_machine_id(cora2, tmp_path):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("10.1.0.11 30050\n10.1.0.11 30060\n")  # two machines on one host
    plan = plan_job(cora2, ["python3", "x.py"], mode="cluster", hosts=read_host_file(hosts), workdir=tmp_path / "j")
    for p in plan.processes:
        env = dict(w.split("=", 1) for w in shlex.split(p.full_argv[-1].split("exec env ", 1)[1]) if "=" in w)
        assert env[emulation.MACHINE_ENV] == str(p.machine) and env[emulation.REQUIRED_ENV] == "required"


# --- item 8: every local start path preflights; -X and -W take a value

@pytest.mark.parametrize("options", [["-X", "dev", "-E"], ["-W", "ignore", "-E"]])
def test_preflight_reads_past_options_with_a_value(options):
    with pytest.raises(emulation.EmulationError, match="-E, which ignores PYTHONPATH"):
        emulation.preflight([sys.executable, *options, "train.py"], emulation.emulation_env("gnnbook1x0abcde", 0))


def script(folder: Path, first_line: str) -> Path:
    """An executable script whose #! line is ``first_line``."""
    path = folder / "train.py"
    path.write_text(f"{first_line}\nprint('started')\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("line, cause", [(f"#!{sys.executable} -I", "isolated \\(-I\\)"),
                                         (f"#!/usr/bin/env -S {sys.executable} -E", "-E, which ignores"),
                                         ("#!/usr/bin/env -S python3 -S", "-S, which skips")])
def test_preflight_follows_a_scripts_interpreter_line(tmp_path, line, cause):
    """argv[0] is not python*: the script's #! line (and env's) names the interpreter and its options."""
    env = emulation.emulation_env("gnnbook1x0abcde", 0)
    with pytest.raises(emulation.EmulationError, match=cause):
        emulation.preflight([str(script(tmp_path, line)), "--epochs", "1"], env)
    good = script(tmp_path, f"#!/usr/bin/env {sys.executable}")
    emulation.preflight([str(good)], env)  # adapted: no error
    emulation.preflight(["/usr/bin/env", "-u", "X", sys.executable, str(good)], env)
    with pytest.raises(emulation.EmulationError, match="dropped or replaced PYTHONPATH"):
        emulation.preflight(["/usr/bin/env", "-u", "PYTHONPATH", sys.executable, str(good)], env)


def test_a_script_whose_interpreter_lacks_gnnbook_stops_with_the_reason(cora2, tmp_path):
    """Through `launch`: a script whose #! names an interpreter without gnnbook (or none at all)."""
    for line, reason in (("#!/usr/bin/python3 -s", "cannot import gnnbook"),
                         ("#!/nonexistent/python3", "cannot be started")):
        done = gnnbook_cli("launch", "--part-config", str(cora2), "--", str(script(tmp_path, line)))
        assert done.returncode == 2 and reason in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]


def test_local_cluster_run_preflights_before_starting(cora2, tmp_path):
    with LocalCluster(cora2, workdir=tmp_path / "w", deadline_s=60) as cluster:
        with pytest.raises(emulation.EmulationError, match="-I"):
            cluster.run([sys.executable, "-I", "-c", "print('started')"])
    assert not list(tmp_path.rglob("logs"))  # nothing started


# --- item 10: resuming with no epochs left

def test_resume_with_no_epochs_left_is_refused(cora2, tmp_path):
    config = TrainConfig(epochs=3, checkpoint_dir=str(tmp_path / "ckpt"), resume=True)
    save_checkpoint(config.checkpoint_dir, dict(epoch=2, history=[], identity=identity(config, 4, cora2)))
    with pytest.raises(CheckpointError, match="already trained 3 epochs and --epochs is 3"):
        resume_state(config, 4, cora2)
    assert resume_state(TrainConfig(**{**config.to_dict(), "epochs": 4}), 4, cora2)["epoch"] == 2


# --- item 6: repeatable sampling refuses the layouts it cannot repeat, before anything starts

@pytest.mark.parametrize("layout, reason", [(["--num-servers", "2"], "1 graph server per machine"),
                                            (["--num-samplers", "1"], "sampler process")])
def test_repeatable_sampling_refuses_several_servers_or_samplers(cora2, tmp_path, layout, reason):
    done = gnnbook_cli("dist-train", "--part-config", str(cora2), *layout, "--repeatable-sampling", "--epochs", "1",
                       "--no-baseline", "--workdir", str(tmp_path / "w"), timeout=120)
    assert done.returncode == 2 and reason in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert not list(tmp_path.rglob("logs"))  # refused before any process started
