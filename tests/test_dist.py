"""gnnbook.distributed without running a job: partitions and their read-back, bad
inputs, the cluster dry run, the shared-memory adaptation, CLI errors."""
from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gnnbook.distributed import emulation
from gnnbook.distributed.commands import register
from gnnbook.distributed.config import TrainConfig
from gnnbook.distributed.launcher import LaunchError, plan_job, read_host_file, render
from gnnbook.distributed.partition_files import PartitionError, load_partition, read_config
from gnnbook.distributed.partition_cache import partition_dataset


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("parts")
    return {m: partition_dataset("cora", 2, m, root / m) for m in ("metis", "random")}


def cli(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(list(argv))


def test_readback_metis_cuts_far_fewer_edges_than_random(parts):
    metis, rand = load_partition(parts["metis"]), load_partition(parts["random"])
    for report in (metis, rand):
        assert report.num_parts == 2 and report.num_nodes == 2708
        assert sum(p.inner_nodes for p in report.parts) == 2708
        assert sum(p.train_nodes for p in report.parts) == 140
        assert report.replication_factor == pytest.approx(1 + sum(p.halo_nodes for p in report.parts) / 2708)
    assert 0.45 < rand.edge_cut_fraction < 0.55  # random: ~1 - 1/k
    assert metis.edge_cut_fraction < 0.15 and metis.replication_factor < rand.replication_factor
    assert metis.train_balance < 1.1 and metis.node_balance < 1.1  # METIS balances training nodes
    assert "edge cut" in metis.table() and json.loads(json.dumps(metis.to_dict()))["num_parts"] == 2


def test_partition_is_atomic_and_refuses_bad_input(tmp_path, parts):
    with pytest.raises(PartitionError, match="at most as many partitions as nodes"):
        partition_dataset("powerlaw", 50, "random", tmp_path / "p", num_nodes=20)
    with pytest.raises(PartitionError, match="unknown partition method"):
        partition_dataset("cora", 2, "spectral", tmp_path / "p")
    with pytest.raises(PartitionError, match="already exists"):
        partition_dataset("cora", 2, "random", parts["random"].parent)
    assert not (tmp_path / "p").exists() and not list(tmp_path.glob(".p.*"))  # nothing half-written


def test_missing_or_corrupt_config(tmp_path, parts):
    with pytest.raises(PartitionError, match="does not exist"):
        read_config(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(PartitionError, match="not valid JSON"):
        load_partition(bad)
    config = json.loads(parts["metis"].read_text())
    config["part-1"]["part_graph"] = "part1/missing.dgl"
    damaged = parts["metis"].parent / "damaged.json"
    damaged.write_text(json.dumps(config))
    with pytest.raises(PartitionError, match="missing"):
        load_partition(damaged)
    damaged.unlink()


def test_zero_trainers_and_bad_host_file(tmp_path, parts):
    with pytest.raises(LaunchError, match="trainers"):
        plan_job(parts["metis"], ["python", "x.py"], num_trainers=0)
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("10.0.0.1 30050\nnot-an-ip\n")
    with pytest.raises(LaunchError, match="hosts.txt:2"):
        read_host_file(hosts)
    hosts.write_text("10.0.0.1\n")
    with pytest.raises(LaunchError, match="1 hosts but"):
        plan_job(parts["metis"], ["python", "x.py"], mode="cluster", hosts=read_host_file(hosts))


def test_cluster_dry_run_commands(tmp_path, parts):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("# two machines\n10.1.0.11 30050\n10.1.0.12 30060\n")
    plan = plan_job(parts["metis"], ["python3", "train.py", "--epochs", "2"], num_trainers=2, mode="cluster",
                    hosts=read_host_file(hosts), workdir=tmp_path / "job")
    assert (tmp_path / "job" / "ip_config.txt").read_text() == "10.1.0.11 30050\n10.1.0.12 30060\n"
    names = [p.name for p in plan.processes]
    assert names == ["server-m0-s0", "server-m1-s0", "trainer-m0-r0", "trainer-m0-r1", "trainer-m1-r0", "trainer-m1-r1"]
    for p in plan.processes:
        ip = ["10.1.0.11", "10.1.0.12"][p.machine]
        assert p.full_argv[0] == "ssh" and ip in p.full_argv and "BatchMode=yes" in p.full_argv
        remote = p.full_argv[-1]
        env = dict(w.split("=", 1) for w in shlex.split(remote.split("exec env ", 1)[1])
                   if "=" in w and not w.startswith("-"))
        assert remote.endswith("python3 train.py --epochs 2")
        assert env["DGL_NUM_CLIENT"] == "4" and env["DGL_NUM_SERVER"] == "1"
        assert env["DGL_CONF_PATH"] == str(parts["metis"].resolve())
        if p.role == "server":
            assert env["DGL_ROLE"] == "server" and env["DGL_SERVER_ID"] == str(p.machine)
        else:
            assert env["DGL_ROLE"] == "client" and env["DGL_DIST_MODE"] == "distributed"
            assert env["MASTER_ADDR"] == "10.1.0.11" and env["WORLD_SIZE"] == "4"
            assert env["RANK"] == str(p.machine * 2 + int(p.name[-1]))
    text = render(plan)
    assert text.count("# trainer-") == 4 and "10.1.0.12 30060" in text


def test_dist_train_dry_run_cli(tmp_path, parts, capsys):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("10.1.0.11\n10.1.0.12\n")
    args = cli("dist-train", "--part-config", str(parts["metis"]), "--hosts", str(hosts), "--dry-run", "--epochs", "3",
               "--workdir", str(tmp_path / "jobs"))
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert out.count("ssh ") == 4 and "gnnbook.distributed.trainer" in out and "--epochs 3" in out


def test_cli_errors_are_one_paragraph(tmp_path, capsys):
    args = cli("dist-train", "--part-config", str(tmp_path / "missing.json"), "--epochs", "1")
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "Traceback" not in err
    args = cli("partition", "--dataset", "no-such-data", "--num-parts", "2", "--out", str(tmp_path / "x"))
    assert args.func(args) == 2 and "unknown dataset" in capsys.readouterr().err


def test_shared_memory_names_get_the_machine_prefix():
    assert emulation.prefixed("/cora_node_feat", "j1m0_") == "/j1m0_cora_node_feat"
    assert emulation.prefixed("node:_N:feat-kvdata-", "j1m0_") == "j1m0_node:_N:feat-kvdata-"
    assert emulation.prefixed("/j1m0_x", "j1m0_") == "/j1m0_x"  # idempotent
    env = emulation.emulation_env("gnnbookabc", 1)
    # The segment DGL's kvstore really creates, as /dev/shm lists it while it exists.
    code = ("import os, dgl.distributed.rpc_client as r, dgl.distributed.kvstore as k;"
            "a = k.empty_shared_mem('probe_feat-kvdata-', True, (4,), 'float32');"
            "print(r.get_local_machine_id({}), *sorted(n for n in os.listdir('/dev/shm') if 'probe_feat' in n))")
    out = subprocess.run([sys.executable, "-c", code], env={**__import__("os").environ, **env},
                         capture_output=True, text=True, timeout=120)
    for name in out.stdout.split()[1:]:  # DGL may leave it: the job's clean-up would remove it
        __import__("pathlib").Path("/dev/shm", name).unlink(missing_ok=True)
    assert out.stdout.split() == ["1", "gnnbookabcm1_probe_feat-kvdata-"], out.stdout + out.stderr[-2000:]


def test_train_config_round_trip():
    config = TrainConfig(model="gat", fanouts=[5, 5, 5], checkpoint_dir="/tmp/c", resume=True, lr=0.002)
    assert TrainConfig.from_argv(config.to_argv()) == config
    with pytest.raises(ValueError, match="unknown model"):
        TrainConfig(model="gcn2")


def test_launch_dry_run_of_any_script(parts, capsys):
    args = cli("launch", "--part-config", str(parts["metis"]), "--num-trainers", "2", "--dry-run",
               "--", "python3", "my_distdgl.py", "--lr", "0.1")
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert out.count("python3 my_distdgl.py --lr 0.1") == 6  # 2 servers + 4 trainers
    assert "GNNBOOK_MACHINE_ID=1" in out and "DGL_ROLE=server" in out and "127.0.0.1" in out


def test_job_processes_die_with_a_killed_supervisor(tmp_path):
    """No orphans: SIGKILL the process that supervises a group; its members go too."""
    import os
    import signal
    import time

    import psutil

    # Without the watchdog (which would kill it too), only PR_SET_PDEATHSIG can take the child down.
    code = ("import sys, time; from gnnbook.base.procs import ProcessGroup; "
            "g = ProcessGroup(60, log_dir=sys.argv[1], watchdog=False); "
            "p = g.start('sleeper', [sys.executable, '-c', 'import time; time.sleep(120)']); "
            "print(p.pid, flush=True); time.sleep(120)")
    parent = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        child = psutil.Process(int(parent.stdout.readline()))
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        end = time.monotonic() + 10
        while child.is_running() and child.status() != psutil.STATUS_ZOMBIE and time.monotonic() < end:
            time.sleep(0.1)
        assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    finally:
        parent.kill()
