"""No other user of the host can reach a job (issue 22, items 2 and 11).

- a local job runs in a private user + network namespace where the kernel
  allows one: another uid (``nobody``) connecting to the job's listening
  ports gets through none of them, while the job's own processes reach them
  (the test fails if the namespace is missing: on the shared loopback the
  other uid gets through, which the second case shows and the fallback's
  warning names);
- where namespaces are unavailable the job runs on the shared loopback with a
  warning naming the exposure and what to enable;
- netns mode: the root namespace (any local user) has no route to the machines;
- what a SIGKILLed launcher leaves is cleaned by a watchdog: a cluster job's
  remote processes (marked as the job's) and ``/dev/shm`` (the ssh commands, with
  ssh replaced; the command itself run here), netns mode's namespaces between jobs.

Each job test starts one real DistDGL job (about 10-30 s).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gnnbook.base import private_net, reaper
from gnnbook.distributed.cluster import LocalCluster
from gnnbook.distributed.config import TrainConfig
from gnnbook.distributed.launcher import LaunchError, plan_job, read_host_file, remote_cleanup_script
from gnnbook.distributed.netns import netns_available
from gnnbook.distributed.partition_cache import partition_dataset

NOBODY = 65534
NO_NAMESPACE = private_net.unavailable_reason()
NOT_ROOT = "connecting as another uid (nobody) needs root" if os.geteuid() != 0 else None


@pytest.fixture(scope="module")
def cora2(tmp_path_factory) -> Path:
    return partition_dataset("cora", 2, "random", tmp_path_factory.mktemp("privnet") / "cora2")


def wait_until(condition, within_s: float, what: str):
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if value := condition():
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {within_s} s: {what}")


def listening_ports(tag: str) -> set[int]:
    """The TCP ports the job's processes listen on, read in each process's own network
    namespace (``/proc/PID/net/tcp*``; psutil reads this process's namespace instead),
    matched to the process's sockets by inode."""
    ports = set()
    for pid in reaper.job_pids(tag):
        try:
            inodes = {os.readlink(f"/proc/{pid}/fd/{fd}")[8:-1] for fd in os.listdir(f"/proc/{pid}/fd")
                      if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:[")}
            for table in ("tcp", "tcp6"):
                for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                    fields = line.split()
                    if fields[3] == "0A" and fields[9] in inodes:  # LISTEN, and this process's socket
                        ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        except OSError:  # gone meanwhile
            pass
    return ports


def connect_as(uid: int | None, ports: set[int], prefix: list[str] | None = None) -> dict[int, bool]:
    """Which of ``ports`` on 127.0.0.1 accept a connection from a process of ``uid``
    (a forked child that drops to it), or (``prefix``) from a process started with it."""
    code = ("import json, socket, sys\nout = {}\nfor port in json.loads(sys.argv[1]):\n"
            "    try:\n        socket.create_connection(('127.0.0.1', port), timeout=3).close(); out[port] = True\n"
            "    except OSError:\n        out[port] = False\nprint(json.dumps(out))\n")
    if prefix is not None:
        done = subprocess.run([*prefix, sys.executable, "-c", code, json.dumps(sorted(ports))], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return {int(k): v for k, v in json.loads(done.stdout).items()}
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the other user: drop every id, then try each port
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            out = {}
            for port in ports:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=3).close()
                    out[port] = True
                except OSError:
                    out[port] = False
            os.write(write, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as handle:
        text = handle.read()
    os.waitpid(child, 0)
    return {int(k): v for k, v in json.loads(text).items()}


@pytest.mark.skipif(NO_NAMESPACE is not None or NOT_ROOT is not None, reason=str(NO_NAMESPACE or NOT_ROOT))
@pytest.mark.parametrize("private", [True, False], ids=["private-namespace", "shared-loopback"])
def test_another_uid_cannot_reach_a_running_jobs_ports(cora2, tmp_path, private):
    """A real 2-machine dist-train job: its graph servers, the trainers' receivers and the rendezvous store."""
    with LocalCluster(cora2, workdir=tmp_path, deadline_s=180, private_network=private) as cluster:
        config = TrainConfig(epochs=200, out=str(tmp_path / "result.json"))
        with cluster.start(cluster.trainer_command(config)) as job:
            servers = {m.port for m in job.plan.machines}
            # Both servers listen, and so do the store and the trainers' receivers.
            ports = wait_until(lambda: (p := listening_ports(job.group.tag)) >= servers and len(p) >= 5 and p, 120,
                               f"the job's servers {sorted(servers)}, store and receivers listening")
            assert (job.network is not None) == private
            outsider = connect_as(NOBODY, ports)
            if private:
                assert not any(outsider.values()), f"uid {NOBODY} reached ports {outsider} of the job"
                # The ports are real: the job's own side of the namespace reaches every one.
                assert all(connect_as(None, ports, job.network.prefix()).values())
            else:  # the exposure the fallback's warning names
                assert all(outsider.values()), outsider
            assert job.group.members and all(m.popen.poll() is None for m in job.group.members)


def test_without_namespaces_the_job_warns_of_the_exposure(cora2, tmp_path, monkeypatch, capfd):
    monkeypatch.setattr(private_net, "_probe",
                        lambda: (None, "this kernel refuses an unprivileged user namespace "
                                       "(test); kernel.apparmor_restrict_unprivileged_userns is 1: "
                                       "to enable, sudo sysctl -w ..."))
    with LocalCluster(cora2, workdir=tmp_path / "w", deadline_s=120) as cluster:
        codes = cluster.run([sys.executable, "-c", "pass"])
    assert set(codes.values()) == {0}
    err = capfd.readouterr().err
    assert "warning: this job runs on the host's shared loopback" in err and "apparmor_restrict" in err
    assert "Any other user of this host can connect" in err and "run code as you" in err
    with pytest.raises(LaunchError, match="a private network namespace was asked for, but this kernel refuses"):
        plan_job(cora2, ["python3", "x.py"], workdir=tmp_path / "j", private_network=True)


def test_the_reason_names_the_setting_to_enable(tmp_path, monkeypatch):
    """The kernel's switches, read where they are: each forbidding one is named with its fix."""
    switch = tmp_path / "apparmor_restrict_unprivileged_userns"
    switch.write_text("1\n")
    monkeypatch.setattr(private_net, "SYSCTLS", (("kernel.apparmor_restrict_unprivileged_userns", str(switch), "1",
                                                   "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"),))
    monkeypatch.setattr(private_net, "MAPPINGS", (("--no-such-option",),))  # unshare refuses: no namespace
    private_net._probe.cache_clear()
    try:
        reason = private_net.unavailable_reason()
    finally:
        private_net._probe.cache_clear()
    assert reason.startswith("this kernel refuses an unprivileged user namespace")
    assert "kernel.apparmor_restrict_unprivileged_userns is 1: to enable, sudo sysctl -w " in reason


@pytest.mark.skipif(NO_NAMESPACE is not None, reason=str(NO_NAMESPACE))
def test_ip_is_found_in_sbin_off_a_users_path(monkeypatch, tmp_path):
    """A Debian user's PATH lacks /usr/sbin, where ip lives: the namespace must not be given up for that."""
    import shutil

    if not Path("/usr/sbin/ip").exists() and not Path("/sbin/ip").exists():
        pytest.skip("ip is not in an sbin folder here")
    for tool in ("unshare", "nsenter", "sh", "sleep"):  # a PATH with everything but ip
        (tmp_path / tool).symlink_to(shutil.which(tool))
    monkeypatch.setenv("PATH", str(tmp_path))
    private_net._probe.cache_clear()
    try:
        assert private_net.unavailable_reason() is None
    finally:
        private_net._probe.cache_clear()


# --- netns mode: nothing outside the machines reaches them

@pytest.mark.skipif(netns_available() is not None or NOT_ROOT is not None, reason=str(netns_available() or NOT_ROOT))
def test_netns_machines_are_unreachable_from_the_root_namespace():
    from gnnbook.distributed.netns import EmulatedHosts

    # A connection counts only if it is this server's (a sandbox's gateway may accept any connection).
    listen = ("import socket; s = socket.socket(); s.bind(('0.0.0.0', 30050)); s.listen(); print('up', flush=True)\n"
              "while True:\n    c, _ = s.accept(); c.sendall(b'machine0'); c.close()\n")
    with EmulatedHosts(2) as hosts:
        m0, m1 = hosts.machines
        server = subprocess.Popen([*m0.prefix, sys.executable, "-c", listen], stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout.readline().strip() == "up"
            reach = ("import socket, sys\ntry:\n    c = socket.create_connection((sys.argv[1], 30050), timeout=3)\n"
                     "    c.settimeout(3)\n"
                     "    print('reached' if c.recv(8) == b'machine0' else 'refused: not the server')\n"
                     "except OSError as err:\n    print('refused', err)\n")
            peer = subprocess.run([*m1.prefix, sys.executable, "-c", reach, m0.ip], capture_output=True, text=True,
                                  timeout=30)
            assert peer.stdout.startswith("reached"), peer  # the machines reach each other
            outside = subprocess.run([sys.executable, "-c", reach, m0.ip], capture_output=True, text=True, timeout=30)
            assert outside.stdout.startswith("refused"), outside.stdout  # root's namespace, any user: no route
        finally:
            server.kill()
            server.wait()


# --- what a SIGKILLed launcher leaves is cleaned by a watchdog

FAKE_SSH = """#!/bin/sh
echo "$@" >> {log}
case "$*" in *"rm -f /dev/shm/"*) exit 0;; esac
exec sleep 300
"""

CLUSTER_LAUNCHER = textwrap.dedent("""
    import sys
    import gnnbook.distributed.launcher as launcher
    launcher.SSH = [sys.argv[2]]  # every ssh the job runs, its processes and its clean-up
    from gnnbook.distributed.cluster import Cluster
    with Cluster(sys.argv[1], sys.argv[3], workdir=sys.argv[4], deadline_s=300) as cluster:
        job = cluster.start(["python3", "train.py"])
        print(job.plan.job_tag, flush=True)
        job.wait()
""")


def test_a_killed_cluster_launcher_still_cleans_every_hosts_shared_memory(cora2, tmp_path):
    log, ssh, hosts = tmp_path / "ssh.log", tmp_path / "ssh", tmp_path / "hosts.txt"
    ssh.write_text(FAKE_SSH.format(log=log))
    ssh.chmod(0o755)
    hosts.write_text("10.1.0.11\n10.1.0.12\n")
    launcher = subprocess.Popen([sys.executable, "-c", CLUSTER_LAUNCHER, str(cora2), str(ssh), str(hosts),
                                 str(tmp_path / "jobs")], stdout=subprocess.PIPE, text=True)
    try:
        tag = launcher.stdout.readline().strip()
        wait_until(lambda: log.is_file() and log.read_text().count("train.py") == 4, 30, "the job's 4 processes")
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait(10)
        cleanups = lambda: [line for line in log.read_text().splitlines() if "rm -f /dev/shm/" in line]  # noqa: E731
        wait_until(lambda: len(cleanups()) == 2, 30, "the watchdog's clean-up of both hosts")
        script = remote_cleanup_script(tag)
        assert sorted(cleanups()) == [f"10.1.0.11 {script}", f"10.1.0.12 {script}"]
    finally:
        launcher.kill()
        launcher.wait()
    wait_until(lambda: not reaper.job_pids(tag), 10, "the job's (fake) remote processes killed")


def test_the_remote_cleanup_kills_the_jobs_processes_and_segments_only(cora2, tmp_path):
    """What the clean-up runs on each host, run here: the processes carrying the job's marker (which
    cluster processes now get) are killed and its segments removed; nothing else is touched."""
    tag, other = reaper.new_tag(), reaper.new_tag()
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    ours = subprocess.Popen(sleeper, env={**os.environ, **reaper.marker_env(tag)})
    theirs = subprocess.Popen(sleeper, env={**os.environ, **reaper.marker_env(other)})
    segments = [Path(f"/dev/shm/x{tag}m0_feat"), Path(f"/dev/shm/x{other}m0_feat")]
    for segment in segments:
        segment.write_bytes(b"0")
    try:
        wait_until(lambda: len(reaper.job_pids(tag)) == 1, 10, "the marked process")
        done = subprocess.run(["sh", "-c", remote_cleanup_script(tag)], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        assert ours.wait(10) == -signal.SIGKILL and theirs.poll() is None
        assert not segments[0].exists() and segments[1].exists()
    finally:
        for process in (ours, theirs):
            process.kill()
            process.wait()
        for segment in segments:
            segment.unlink(missing_ok=True)
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("10.1.0.11\n10.1.0.12\n")
    plan = plan_job(cora2, ["python3", "x.py"], mode="cluster", hosts=read_host_file(hosts), workdir=tmp_path / "j")
    for p in plan.processes:  # every remote process carries the marker of its job
        assert f"{reaper.MARKER_PREFIX}{plan.job_tag}=1" in p.full_argv[-1]


NETNS_IDLE_LAUNCHER = textwrap.dedent("""
    import sys, time
    from gnnbook.distributed import LocalCluster
    with LocalCluster(sys.argv[1], mode="netns", deadline_s=60) as cluster:
        print(cluster._namespaces.tag, flush=True)
        time.sleep(300)  # between jobs: no job's watchdog runs
""")


@pytest.mark.skipif(netns_available() is not None, reason=str(netns_available()))
def test_a_launcher_killed_between_netns_jobs_leaves_no_namespace(cora2):
    launcher = subprocess.Popen([sys.executable, "-c", NETNS_IDLE_LAUNCHER, str(cora2)], stdout=subprocess.PIPE,
                                text=True)
    try:
        tag = launcher.stdout.readline().strip()

        def traces() -> dict[str, int]:
            return {"netns": subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.count(tag),
                    "links": subprocess.run(["ip", "link"], capture_output=True, text=True).stdout.count(tag),
                    "mounts": Path("/proc/mounts").read_text().count(tag)}

        assert tag and all(traces().values()), traces()
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait(10)
        wait_until(lambda: not any(traces().values()), 20, f"the namespaces of {tag} removed")
    finally:
        launcher.kill()
        launcher.wait()
