"""Real DistDGL jobs: graph servers and trainers as OS processes on this host.

The acceptance run of ``dist-train``, failures (a killed trainer, a killed
server, a taken port, an unreachable host) that must stop the whole job fast
and leave nothing behind, checkpoint / resume, an unmodified DistDGL script,
and two emulated hosts with their own IPs in network namespaces (root only).
"""
from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from gnnbook.distributed import emulation
from gnnbook.distributed.baseline import train_single_process
from gnnbook.distributed.cluster import Cluster, LocalCluster
from gnnbook.distributed.commands import BASELINE_SEEDS
from gnnbook.distributed.config import TrainConfig
from gnnbook.distributed.launcher import Job, JobFailed, LaunchError, plan_job
from gnnbook.distributed.netns import netns_available
from gnnbook.distributed.partition import partition_dataset

@pytest.fixture(scope="module")
def cora2(tmp_path_factory) -> Path:
    return partition_dataset("cora", 2, "metis", tmp_path_factory.mktemp("jobs") / "cora2")


@pytest.fixture(autouse=True)
def nothing_left_behind():
    before = {p.name for p in emulation.SHM_DIR.iterdir()} if emulation.SHM_DIR.is_dir() else set()
    yield
    children = psutil.Process().children(recursive=True)
    leaked = [p.name for p in emulation.SHM_DIR.iterdir() if p.name.startswith("gnnbook") and p.name not in before]
    for child in children:  # clean up before failing, never leave a process
        child.kill()
    assert not children, f"processes left running: {children}"
    assert not leaked, f"shared-memory segments left: {leaked}"


def processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any(text in part for part in proc.info["cmdline"] or []):
            found.append(" ".join(proc.info["cmdline"]))
    return found


def wait_for_line(job: Job, name: str, text: str, timeout: float = 90) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if text in job.log(name):
            return
        for m in job.group.members:
            assert m.popen.poll() in (None, 0), f"{m.name} exited early:\n{job.log(m.name)[-2000:]}"
        time.sleep(0.2)
    raise AssertionError(f"{name} never printed {text!r}")


def test_dist_train_acceptance(tmp_path):
    """cora, 2 partitions x 2 trainers, 20 epochs: accuracy within 2 points of
    one process, in under 2 minutes, nothing left behind."""
    env = {**os.environ, "GNNBOOK_DATA_DIR": str(tmp_path)}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "gnnbook", "dist-train", "--dataset", "cora", "--num-parts", "2",
                           "--num-trainers", "2", "--epochs", "20", "--json", "--deadline", "200"],
                          capture_output=True, text=True, env=env, timeout=280)
    seconds = time.monotonic() - start
    assert done.returncode == 0, done.stderr[-5000:]
    result = json.loads(done.stdout)
    print(f"dist-train: {seconds:.0f} s, test {result['test_acc']:.3f} vs single {result['single_process']['test_acc_mean']:.3f}")
    assert seconds < 180  # 2 minutes on a quiet machine; slack for a shared CI core
    single = result["single_process"]
    assert len(single["test_acc_per_seed"]) == BASELINE_SEEDS and single["test_acc_per_seed"][0] == single["test_acc"]
    assert abs(result["accuracy_gap"]) <= 0.02 and result["test_acc"] > 0.7
    assert result["world_size"] == 4 and len(set(result["steps_per_trainer"])) == 1
    assert result["steps_per_trainer"][0] == 20 * result["steps_per_epoch"]
    assert result["single_process"]["steps_per_epoch"] == result["steps_per_epoch"]
    rows = result["feature_rows"]
    assert 0 < rows["remote_fraction"] < 0.5 and all(r > 0 for r in rows["local"])
    assert result["shm_segments_left"] == []
    assert processes_mentioning(str(tmp_path)) == []
    assert (tmp_path / "partitions" / "cora-metis-2" / "cora.json").is_file()
    assert not [p for p in (tmp_path / "partitions").iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("victim", ["trainer-m1-r0", "server-m1-s0"])
def test_killed_process_stops_the_job(cora2, victim):
    with LocalCluster(cora2, num_trainers=1, deadline_s=120) as cluster:
        with cluster.start(cluster.trainer_command(TrainConfig(epochs=200))) as job:
            wait_for_line(job, "trainer-m0-r0", "epoch 0:")
            os.kill(job.pid(victim), signal.SIGKILL)
            killed = time.monotonic()
            with pytest.raises(JobFailed) as failure:
                job.wait()
            assert time.monotonic() - killed < 30
        assert failure.value.name == victim and "SIGKILL" in str(failure.value)
        assert all(m.popen.poll() is not None for m in job.group.members)
        assert emulation.job_segments(job.plan.job_tag) == []


def test_taken_port(cora2, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        with pytest.raises(LaunchError, match=f"port {port} .* already taken"):
            plan_job(cora2, ["python", "x.py"], base_port=port, workdir=tmp_path / "a")
    # Taken between planning and start: the server fails and the job stops.
    plan = plan_job(cora2, LocalCluster(cora2).trainer_command(TrainConfig(epochs=2)), workdir=tmp_path / "b")
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", plan.machines[1].port))
        busy.listen(1)
        start = time.monotonic()
        with pytest.raises(JobFailed) as failure:
            with Job(plan, deadline_s=60) as job:
                job.wait()
    assert time.monotonic() - start < 45
    assert failure.value.name == "server-m1-s0" and "Cannot bind" in str(failure.value)


def test_unreachable_host_fails_fast(cora2, tmp_path, monkeypatch):
    """ssh to a peer certain to refuse: a loopback port just bound and closed
    (no other test address is unreachable everywhere: 192.0.2.x is this very
    host on some machines)."""
    import gnnbook.distributed.launcher as launcher

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setattr(launcher, "SSH", launcher.SSH + ["-p", str(port)])  # ssh's port: the host file's is DGL's
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("127.0.0.1 30050\n127.0.0.1 30051\n")
    start = time.monotonic()
    with pytest.raises(JobFailed) as failure:
        with Cluster(cora2, hosts, deadline_s=60, workdir=tmp_path / "w") as cluster:
            cluster.train(TrainConfig(epochs=1))
    assert f"port {port}: Connection refused" in str(failure.value)
    assert time.monotonic() - start < 15


def test_global_deadline_stops_a_hang(cora2):
    with LocalCluster(cora2, num_trainers=1, deadline_s=4) as cluster:
        start = time.monotonic()
        with pytest.raises(JobFailed, match="deadline of 4 s passed"):
            cluster.run([sys.executable, "-c", "import time; time.sleep(600)"])
    assert time.monotonic() - start < 15


def test_resume_after_a_crash(cora2, tmp_path):
    # 10 epochs, so that both runs end past the steep start of the learning
    # curve, where a few steps more or less move Cora's accuracy by points.
    config = TrainConfig(epochs=10, checkpoint_dir=str(tmp_path / "ckpt"), fail_after_epoch=3)
    with LocalCluster(cora2, num_trainers=1, deadline_s=120) as cluster:
        with pytest.raises(JobFailed) as failure:
            cluster.train(config)
        assert failure.value.name == "trainer-m0-r0" and "SIGKILL" in str(failure.value)
        resumed = cluster.train(TrainConfig(**{**config.to_dict(), "fail_after_epoch": None, "resume": True}))
    assert resumed["resumed_from_epoch"] == 4 and resumed["epochs_run"] == 10
    assert [h["epoch"] for h in resumed["history"]] == list(range(10))
    assert resumed["steps_per_trainer"] == [6 * resumed["steps_per_epoch"]] * 2
    single = train_single_process(cora2, TrainConfig(epochs=10), num_trainers=2)
    assert abs(resumed["test_acc"] - single["test_acc"]) < 0.05, (resumed["test_acc"], single["test_acc"])


PLAIN_DISTDGL = textwrap.dedent("""
    # A plain DistDGL script: nothing from gnnbook, configured only by DGL's environment.
    import os, sys, torch, dgl
    dgl.distributed.initialize(os.environ["DGL_IP_CONFIG"])
    torch.distributed.init_process_group("gloo")
    g = dgl.distributed.DistGraph("cora")
    book = g.get_partition_book()
    train = dgl.distributed.node_split(g.ndata["train_mask"], book, force_even=True)
    total = torch.tensor([len(train)])
    torch.distributed.all_reduce(total)
    feat = g.ndata["feat"][train]
    with open(os.path.join(sys.argv[1], f"rank{g.rank()}.txt"), "w") as out:
        out.write(f"{book.partid} {len(train)} {int(total)} {feat.shape[1]}")
""")


def test_unmodified_distdgl_script(cora2, tmp_path):
    script = tmp_path / "plain.py"
    script.write_text(PLAIN_DISTDGL)
    with LocalCluster(cora2, num_trainers=1, deadline_s=120) as cluster:
        codes = cluster.run([sys.executable, str(script), str(tmp_path)])
    assert set(codes.values()) == {0}
    rows = sorted((tmp_path / f"rank{r}.txt").read_text().split() for r in range(2))
    assert [r[0] for r in rows] == ["0", "1"]  # each trainer is on its own machine's partition
    assert all(r[2] == "140" and r[3] == "1433" for r in rows)


@pytest.mark.skipif(netns_available() is not None, reason=str(netns_available()))
def test_two_hosts_in_network_namespaces(cora2):
    with LocalCluster(cora2, num_trainers=1, mode="netns", deadline_s=120) as cluster:
        result = cluster.train(TrainConfig(epochs=2))
        ips = [m.ip for m in cluster.last_plan.machines]
    assert len(set(ips)) == 2 and not any(ip.startswith("127.") for ip in ips)
    assert result["world_size"] == 2 and result["steps_per_trainer"][0] == result["steps_per_trainer"][1]
    assert result["feature_rows"]["remote_fraction"] > 0
    assert subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.count("gb") == 0


def test_standalone_gat_in_one_process(tmp_path):
    """Standalone mode: one process, a one-partition config, no servers."""
    config = partition_dataset("cora", 1, "random", tmp_path / "one")
    code = ("import json, sys; from gnnbook.distributed import train_standalone, TrainConfig; "
            "r = train_standalone(sys.argv[1], TrainConfig(model='gat', epochs=1, eval_batch_size=1024)); "
            "print(json.dumps({k: r[k] for k in ('mode', 'test_acc', 'steps_per_trainer', 'feature_rows')}))")
    done = subprocess.run([sys.executable, "-c", code, str(config)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    steps = math.ceil(140 / TrainConfig().batch_size)  # Cora's 140 training nodes, one trainer
    assert result["mode"] == "standalone" and result["steps_per_trainer"] == [steps]
    assert result["feature_rows"]["remote"] == [0] and 0.0 <= result["test_acc"] <= 1.0
