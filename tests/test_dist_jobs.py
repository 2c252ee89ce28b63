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
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
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
from gnnbook.distributed.partition_cache import partition_dataset
from shm_probe import shm_mapped_by  # tests/ is on sys.path under pytest


@pytest.fixture(scope="module")
def cora2(tmp_path_factory) -> Path:
    return partition_dataset("cora", 2, "metis", tmp_path_factory.mktemp("jobs") / "cora2")


# Every job this test process starts is tagged gnnbook<our pid>x<random> (the
# tag is in every job process's environment and in its segments' names), so
# the checks below see our jobs only, not those of anyone else on the host.
OUR_JOBS = f"gnnbook{os.getpid()}x"


def job_processes(tag: str) -> list[int]:
    """Live processes whose environment mentions ``tag``, re-parented or not (read from /proc here)."""
    found, needle = [], tag.encode()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as handle:
                    if needle in handle.read():
                        found.append(int(entry.name))
            except OSError:
                pass
    return found


class JobWatch:
    """Samples, while a test runs, the processes of the jobs tagged ``tag`` and
    the /dev/shm entries they map; :meth:`leftovers` lists what is still there."""

    def __init__(self, tag: str):
        self.tag, self.seen_pids, self.seen_shm = tag, set(), set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            pids = job_processes(self.tag)
            self.seen_pids.update(pids)
            self.seen_shm |= shm_mapped_by(pids)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def leftovers(self) -> tuple[list[int], list[str]]:
        shm = [n for n in list(self.seen_shm) if (emulation.SHM_DIR / n).exists()]  # the sampler thread adds to it
        shm += [p.name for p in emulation.SHM_DIR.iterdir() if self.tag in p.name and p.name not in shm]
        return job_processes(self.tag), shm


@pytest.fixture(autouse=True)
def nothing_left_behind():
    watch = JobWatch(OUR_JOBS)
    yield watch
    watch.stop()
    pids, shm = watch.leftovers()
    for pid in pids:  # clean up before failing, never leave a process
        os.kill(pid, signal.SIGKILL)
    assert not pids, f"processes of this test's jobs left running: {pids}"
    assert not shm, f"shared-memory segments of this test's jobs left: {shm}"


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
    """cora, 2 partitions x 2 trainers, 20 epochs, four runs: their mean accuracy within 2 points of
    one process, in under 2 minutes, nothing left behind."""
    env = {**os.environ, "GNNBOOK_DATA_DIR": str(tmp_path)}
    start = time.monotonic()
    launcher = subprocess.Popen([sys.executable, "-m", "gnnbook", "dist-train", "--dataset", "cora", "--num-parts", "2",
                                 "--num-trainers", "2", "--epochs", "20", "--runs", "4", "--json", "--deadline", "200"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    watch = JobWatch(f"gnnbook{launcher.pid}x")  # its jobs' tag: /dev/shm looked at here, not by gnnbook
    try:
        stdout, stderr = launcher.communicate(timeout=280)
    finally:
        launcher.kill()
        watch.stop()
    seconds = time.monotonic() - start
    assert launcher.returncode == 0, stderr[-5000:]
    result = json.loads(stdout)
    print(f"dist-train: {seconds:.0f} s, test {result['test_acc_per_seed']} (mean {result['test_acc_mean']:.3f}) "
          f"vs single {result['single_process']['test_acc_mean']:.3f}")
    assert seconds < 180  # 2 minutes on a quiet machine; slack for a shared CI core
    single = result["single_process"]
    assert len(single["test_acc_per_seed"]) == BASELINE_SEEDS and single["test_acc_per_seed"][0] == single["test_acc"]
    assert result["test_acc"] > 0.7
    # The servers' sampling is seeded by nobody, so one distributed run's accuracy moves by about a
    # point from job to job (one CI run: 0.779 against 0.813): the job trains four times (--runs 4, seeds
    # 0-3, started once) and the mean of its runs is compared with the 5-seed single-process mean.  With two
    # runs a CI run once measured 0.787 and 0.799 against 0.816 (gap 2.3 points); one run can be 4 points
    # off the others (seeds 0-3 once gave 0.808, 0.815, 0.771, 0.818: mean 0.803 against 0.811).
    assert [r["seed"] for r in result["runs"]] == [0, 1, 2, 3]
    assert result["accuracy_gap"] == result["test_acc_mean"] - single["test_acc_mean"]
    assert abs(result["accuracy_gap"]) <= 0.02, (result["test_acc_per_seed"], single)
    assert result["world_size"] == 4 and len(set(result["steps_per_trainer"])) == 1
    assert result["steps_per_trainer"][0] == 20 * result["steps_per_epoch"]
    assert result["single_process"]["steps_per_epoch"] == result["steps_per_epoch"]
    rows = result["feature_rows"]
    assert 0 < rows["remote_fraction"] < 0.5 and all(r > 0 for r in rows["local"])
    assert len(watch.seen_pids) >= 6 and watch.seen_shm  # 2 servers + 4 trainers, their segments
    assert watch.leftovers() == ([], [])
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
    logs = job.plan.workdir / "logs"  # the failed job's logs outlive the cluster, and the message names them
    assert str(logs) in str(failure.value) and (logs / f"{victim}.log").is_file()
    shutil.rmtree(cluster_root(job))


def cluster_root(job: Job) -> Path:
    return job.plan.workdir.parent


def test_taken_port(cora2, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        with pytest.raises(LaunchError, match=f"port {port} .* already taken"):
            plan_job(cora2, ["python", "x.py"], base_port=port, workdir=tmp_path / "a")
    # Taken between planning and start: the server fails and the job stops.
    plan = plan_job(cora2, LocalCluster(cora2).trainer_command(TrainConfig(epochs=2)), workdir=tmp_path / "b",
                    private_network=False)  # on the shared loopback: a private namespace has no such clash
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


def test_global_deadline_stops_a_hang(cora2, tmp_path):
    with LocalCluster(cora2, num_trainers=1, deadline_s=4, workdir=tmp_path) as cluster:
        start = time.monotonic()
        with pytest.raises(JobFailed, match="deadline of 4 s passed"):
            cluster.run([sys.executable, "-c", "import time; time.sleep(600)"])
    assert time.monotonic() - start < 15


def test_resume_after_a_crash(cora2, tmp_path):
    # 10 epochs, so that both runs end past the steep start of the learning
    # curve, where a few steps more or less move Cora's accuracy by points.
    config = TrainConfig(epochs=10, checkpoint_dir=str(tmp_path / "ckpt"), fail_after_epoch=3)
    with LocalCluster(cora2, num_trainers=1, deadline_s=120, workdir=tmp_path / "w") as cluster:
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


def wait_until(condition, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM"])
def test_killed_launcher_leaves_nothing(cora2, sig):
    """The launcher of a job with sampler processes killed: 10 s later no
    process of the job, none of its segments or semaphores, no temporary folder."""
    launcher = subprocess.Popen([sys.executable, "-m", "gnnbook", "dist-train", "--part-config", str(cora2),
                                 "--num-trainers", "2", "--num-samplers", "1", "--epochs", "500", "--no-baseline",
                                 "--deadline", "300"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    tag = f"gnnbook{launcher.pid}x"
    watch = JobWatch(tag)
    try:
        # 2 servers, 4 trainers, their 4 samplers and multiprocessing's trackers
        wait_until(lambda: len(job_processes(tag)) >= 14 and any(s.startswith("sem.mp-") for s in watch.seen_shm),
                   150, "the job's sampler processes")
        time.sleep(3.0)  # the watchdog records the job's segments once a second (late under load)
        # Every process that has DGL's IP config names the job's folder (the store process has none).
        workdirs = {Path(line.split("=", 1)[1]).parent.parent for pid in job_processes(tag)
                    for line in Path(f"/proc/{pid}/environ").read_text().split("\0")
                    if line.startswith("DGL_IP_CONFIG=")}
        assert workdirs, "no process of the job names its folder"
        os.kill(launcher.pid, getattr(signal, sig))
        killed = time.monotonic()
        launcher.wait(10)
        # Done when nothing is left (the watchdog unlinks segments one by one) or 10 s have passed.
        wait_until(lambda: watch.leftovers() == ([], []) and not any(w.exists() for w in workdirs)
                   or time.monotonic() - killed > 10, 12, "")
        watch.stop()
        pids, shm = watch.leftovers()
        print(f"{sig}: {len(watch.seen_pids)} processes and {len(watch.seen_shm)} segments seen; "
              f"{time.monotonic() - killed:.1f} s later {len(pids)} processes and {len(shm)} segments left")
        assert len(watch.seen_pids) >= 14
        assert (pids, shm) == ([], []), f"10 s after {sig} of the launcher"
        assert all(str(w).startswith(tempfile.gettempdir()) and not w.exists() for w in workdirs), workdirs
        assert launcher.returncode == -getattr(signal, sig)
    finally:
        launcher.kill()
        watch.stop()
        for pid in job_processes(tag):
            os.kill(pid, signal.SIGKILL)


NETNS_LAUNCHER = """
import sys
from gnnbook.distributed import LocalCluster, TrainConfig
with LocalCluster(sys.argv[1], mode="netns", deadline_s=300) as cluster:
    print(cluster._namespaces.tag, flush=True)
    cluster.train(TrainConfig(epochs=500))
"""


@pytest.mark.skipif(netns_available() is not None, reason=str(netns_available()))
def test_killed_netns_launcher_leaves_no_namespace(cora2):
    launcher = subprocess.Popen([sys.executable, "-c", NETNS_LAUNCHER, str(cora2)], stdout=subprocess.PIPE, text=True)
    tag = f"gnnbook{launcher.pid}x"
    try:
        hosts = launcher.stdout.readline().strip()

        def traces() -> dict[str, int]:
            return {"netns": subprocess.run(["ip", "netns", "list"], capture_output=True,
                                            text=True).stdout.count(hosts),
                    "links": subprocess.run(["ip", "link"], capture_output=True, text=True).stdout.count(hosts),
                    "mounts": Path("/proc/mounts").read_text().count(hosts), "processes": len(job_processes(tag))}

        wait_until(lambda: len(job_processes(tag)) >= 4, 150, "the job's servers and trainers")
        assert all(traces().values())
        os.kill(launcher.pid, signal.SIGKILL)
        killed = time.monotonic()
        wait_until(lambda: not any(traces().values()) or time.monotonic() - killed > 10, 12, "")
        assert not any(traces().values()), traces()
    finally:
        launcher.kill()
        for pid in job_processes(tag):
            os.kill(pid, signal.SIGKILL)


def test_two_jobs_at_once(cora2, tmp_path):
    """Two local jobs of the same partitions on one host at the same time: own
    ports, own segments, each trainer on its own machine's partition."""
    script = tmp_path / "plain.py"
    script.write_text(PLAIN_DISTDGL)
    outs = [tmp_path / "a", tmp_path / "b"]
    with LocalCluster(cora2, deadline_s=150) as first, LocalCluster(cora2, deadline_s=150) as second:
        with first.start([sys.executable, str(script), str(outs[0])]) as a, \
                second.start([sys.executable, str(script), str(outs[1])]) as b:
            for out in outs:
                out.mkdir()
            assert {m.port for m in a.plan.machines}.isdisjoint(m.port for m in b.plan.machines)
            assert set(a.wait().values()) == set(b.wait().values()) == {0}
    for out in outs:
        rows = sorted((out / f"rank{r}.txt").read_text().split() for r in range(2))
        assert [r[0] for r in rows] == ["0", "1"] and all(r[2] == "140" for r in rows)


HUNG_PEER = textwrap.dedent("""
    # Trainer 1 leaves without a word (exit 0, DGL's exit handler skipped) while a
    # child it forked keeps its sockets open: trainer 0 waits in all_reduce forever.
    import os, sys, time, torch, dgl
    dgl.distributed.initialize(os.environ["DGL_IP_CONFIG"])
    torch.distributed.init_process_group("gloo")
    def blocked_in_all_reduce():
        torch.distributed.all_reduce(torch.ones(1))
    if torch.distributed.get_rank() == 1:
        if os.fork() == 0:
            time.sleep(600)
        os._exit(0)
    print("entering all_reduce", flush=True)
    blocked_in_all_reduce()
""")


def test_hung_trainer_is_stopped_with_its_stack_in_the_log(cora2, tmp_path):
    """A trainer exits 0 while its peer waits: the peer gets a grace period,
    then every process dumps its stack (SIGUSR1) and the job is stopped."""
    script = tmp_path / "hung.py"
    script.write_text(HUNG_PEER)
    with LocalCluster(cora2, workdir=tmp_path / "w") as cluster:
        plan = cluster.plan([sys.executable, str(script)])
        with Job(plan, deadline_s=150, peer_exit_grace_s=5) as job:
            with pytest.raises(JobFailed,
                               match="'trainer-m1-r0' exited with code 0 but trainer-m0-r0 still ran") as failure:
                job.wait()
    log = job.log("trainer-m0-r0")
    assert "entering all_reduce" in log and "in blocked_in_all_reduce" in log, log[-3000:]
    assert "blocked_in_all_reduce" in str(failure.value)  # the dump is in the error's log tail too


def test_a_start_that_fails_half_way_stops_what_started(cora2, tmp_path):
    plan = plan_job(cora2, [sys.executable, "-c", "import time; time.sleep(600)"], workdir=tmp_path)
    plan.processes[-1].full_argv = [str(tmp_path / "no-such-program")]
    job = Job(plan, deadline_s=60)
    with pytest.raises(FileNotFoundError):
        job.start()
    assert len(job.group.members) == len(plan.processes) - 1
    assert all(m.popen.poll() is not None for m in job.group.members)


def test_cluster_job_folders_do_not_overwrite_each_other(cora2, tmp_path):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("10.0.0.1 30050\n10.0.0.2 30050\n")
    folders = [Cluster(cora2, hosts, workdir=tmp_path / "jobs").plan(["python", "x.py"]).workdir for _ in range(2)]
    assert folders[0] != folders[1] and all(f.parent == tmp_path / "jobs" for f in folders)


NOTEBOOK_CELL = """
from gnnbook.distributed import LocalCluster, TrainConfig
with LocalCluster({cora2!r}, num_trainers=1, deadline_s=300) as cluster:
    cluster.train(TrainConfig(epochs=500))
"""


def test_ctrl_c_in_a_notebook_kernel_stops_the_job(cora2):
    """An interrupt sent to a Jupyter kernel while a LocalCluster job runs
    (the notebook's stop button) stops the job; nothing of it is left and the
    kernel lives on."""
    from jupyter_client.manager import KernelManager

    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(env={**os.environ})
    client = manager.client()
    client.start_channels()
    tag = f"gnnbook{manager.provisioner.pid}x"  # the kernel runs the launcher
    watch = JobWatch(tag)
    try:
        client.wait_for_ready(timeout=60)
        msg_id = client.execute(NOTEBOOK_CELL.format(cora2=str(cora2)))
        wait_until(lambda: len(job_processes(tag)) >= 4 and watch.seen_shm, 150, "the job's servers and trainers")
        time.sleep(2)
        manager.interrupt_kernel()
        interrupted = time.monotonic()
        reply = client.get_shell_msg(timeout=60)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = client.get_shell_msg(timeout=60)
        assert (reply["content"]["status"] == "error"
                and reply["content"]["ename"] == "KeyboardInterrupt"), reply["content"]
        wait_until(lambda: not job_processes(tag) or time.monotonic() - interrupted > 10, 12, "")
        watch.stop()
        assert len(watch.seen_pids) >= 4 and watch.leftovers() == ([], [])
        assert client.execute_interactive("1 + 1", timeout=30)["content"]["status"] == "ok"  # the kernel lives on
    finally:
        watch.stop()
        client.stop_channels()
        manager.shutdown_kernel(now=True)
        for pid in job_processes(tag):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(netns_available() is not None, reason=str(netns_available()))
def test_two_hosts_in_network_namespaces(cora2):
    with LocalCluster(cora2, num_trainers=1, mode="netns", deadline_s=120) as cluster:
        result = cluster.train(TrainConfig(epochs=2))
        ips = [m.ip for m in cluster.last_plan.machines]
    assert len(set(ips)) == 2 and not any(ip.startswith("127.") for ip in ips)
    assert result["world_size"] == 2 and result["steps_per_trainer"][0] == result["steps_per_trainer"][1]
    assert result["feature_rows"]["remote_fraction"] > 0
    assert subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.count("gb") == 0



@pytest.mark.skipif(netns_available() is not None, reason=str(netns_available()))
def test_a_hung_unmodified_script_in_netns_mode_dumps_its_stack(cora2, tmp_path):
    """Issue 22, item 14: our sitecustomize reaches netns processes, so any Python script's log shows
    where it hung before the job is killed."""
    with LocalCluster(cora2, num_trainers=1, mode="netns", deadline_s=10, workdir=tmp_path) as cluster:
        with pytest.raises(JobFailed, match="deadline of 10 s passed"):
            cluster.run([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(600)"])
        logs = cluster.last_plan.workdir / "logs"
        trainer = (logs / "trainer-m1-r0.log").read_text()
    assert "up" in trainer and "most recent call first" in trainer, trainer

def test_standalone_gat_in_one_process(tmp_path):
    """Standalone mode: one process, a one-partition config, no servers; the interfaces exercise of chapter
    8.3.2, which needs servers and other trainers, is refused with a clear error."""
    config = partition_dataset("cora", 1, "random", tmp_path / "one")
    code = textwrap.dedent("""
        import json, sys
        from gnnbook.distributed import train_standalone, TrainConfig
        try:
            train_standalone(sys.argv[1], TrainConfig(epochs=1, exercise_interfaces=True))
        except ValueError as err:
            print("refused:", err)
        r = train_standalone(sys.argv[1], TrainConfig(model='gat', epochs=1, eval_batch_size=1024))
        print(json.dumps({k: r[k] for k in ('mode', 'test_acc', 'steps_per_trainer', 'feature_rows')}))
    """)
    done = subprocess.run([sys.executable, "-c", code, str(config)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "refused: exercise_interfaces needs a distributed job" in done.stdout, done.stdout
    result = json.loads(done.stdout.strip().splitlines()[-1])
    steps = math.ceil(140 / TrainConfig().batch_size)  # Cora's 140 training nodes, one trainer
    assert result["mode"] == "standalone" and result["steps_per_trainer"] == [steps]
    assert result["feature_rows"]["remote"] == [0] and 0.0 <= result["test_acc"] <= 1.0


def test_a_job_with_sampler_processes_finishes(cora2):
    """Trainers with a DGL sampler process each (--num-samplers 1) train and
    exit cleanly: samplers start, serve the minibatches and stop with their trainer."""
    with LocalCluster(cora2, num_trainers=1, num_samplers=1, deadline_s=180) as cluster:
        result = cluster.train(TrainConfig(epochs=2))
    assert result["epochs_run"] == 2 and result["world_size"] == 2
    assert result["test_acc"] > 0.3  # two epochs: learning, not converged
