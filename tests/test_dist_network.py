"""The network side of the DistDGL runtime: what a job listens on, and ports.

- a real local job on the shared loopback (where the kernel allows no private
  network namespace, see test_dist_private_net; forced here with
  ``private_network=False``; 2 partitions, 2 servers per machine, a sampler
  process per trainer) listens on loopback only, in every one of its processes, while it
  trains; where this host can fake it (root), the job runs with a host name
  that resolves to a non-loopback address of this host, as on many laptops
  and servers, which is where gloo used to listen;
- on the shared loopback, a port taken between planning and start (a server's or the rendezvous
  store's, MASTER_PORT) makes the job start again with fresh ports, or fail
  with the port named; ports are checked on the address that will be bound;
- the host-file parser takes only canonical IPv4 addresses.
"""
from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from gnnbook.distributed import launcher
from gnnbook.distributed.cluster import LocalCluster
from gnnbook.distributed.config import TrainConfig
from gnnbook.distributed.launcher import Job, JobFailed, LaunchError, plan_job, port_is_free, read_host_file
from gnnbook.distributed.partition_cache import partition_dataset


@pytest.fixture(scope="module")
def cora2(tmp_path_factory) -> Path:
    return partition_dataset("cora", 2, "metis", tmp_path_factory.mktemp("net") / "cora2")


# Run as the job's launcher in a subprocess: start a job with 2 servers per
# machine and a sampler process per trainer, record every listening TCP socket
# (IPv4 and IPv6) of every process under this one until rank 0 has printed its
# third epoch, stop the job, print the sockets and rank 0's log.
WATCHER = textwrap.dedent("""
    import json, sys, time, psutil
    from gnnbook.distributed.cluster import LocalCluster
    from gnnbook.distributed.config import TrainConfig

    part_config, workdir = sys.argv[1], sys.argv[2]
    seen, error = {}, None
    with LocalCluster(part_config, num_trainers=1, num_servers=2, num_samplers=1, workdir=workdir,
                      private_network=False) as cluster:
        with cluster.start(cluster.trainer_command(TrainConfig(epochs=50))) as job:
            end = time.monotonic() + 240
            while "epoch 2:" not in job.log("trainer-m0-r0"):
                failed = [m.name for m in job.group.members if m.popen.poll() is not None]
                if failed or time.monotonic() > end:
                    error = f"exited early or too slow: {failed}"
                    break
                for proc in psutil.Process().children(recursive=True):
                    try:
                        name = " ".join(proc.cmdline()[1:4])
                        for c in proc.net_connections(kind="tcp"):
                            if c.status == psutil.CONN_LISTEN:
                                seen[f"{c.laddr.ip} {c.laddr.port} {proc.pid}"] = name
                    except psutil.Error:
                        pass
                time.sleep(0.2)
            log = job.log("trainer-m0-r0")
        plan = cluster.last_plan
    print(json.dumps(dict(listening=seen, error=error, log=log, ports=[m.port for m in plan.machines],
                          master_port=plan.processes[0].argv[-3], env=plan.processes[-1].env)))
""")


def _non_loopback_ipv4() -> str | None:
    for addresses in psutil.net_if_addrs().values():
        for a in addresses:
            if a.family == socket.AF_INET and not ipaddress.ip_address(a.address).is_loopback:
                return a.address
    return None


def _hostname_wrapper(tmp_path: Path) -> tuple[list[str], str]:
    """Run the job with a host name that resolves to a non-loopback address of
    this host (a private UTS + mount namespace with its own /etc/hosts), when root can."""
    address = _non_loopback_ipv4()
    if os.geteuid() != 0 or address is None or shutil.which("unshare") is None:
        return [], "host name as it is"
    hosts = tmp_path / "hosts"
    hosts.write_text(f"127.0.0.1 localhost\n{address} gnnbook-net-test\n")
    probe = subprocess.run(["unshare", "--mount", "--uts", "true"], capture_output=True)
    if probe.returncode != 0:
        return [], "host name as it is"
    return (["unshare", "--mount", "--uts", "sh", "-c",
             'mount --bind "$0" /etc/hosts && hostname gnnbook-net-test && exec "$@"', str(hosts)],
            f"host name resolving to {address}")


@pytest.fixture(scope="module")
def watched_job(cora2, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("watched")
    script = tmp / "watch.py"
    script.write_text(WATCHER)
    wrapper, how = _hostname_wrapper(tmp)
    start = time.monotonic()
    done = subprocess.run(wrapper + [sys.executable, str(script), str(cora2), str(tmp / "work")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-5000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    report["how"], report["seconds"] = how, time.monotonic() - start
    return report


def test_local_job_listens_on_loopback_only(watched_job):
    listening = watched_job["listening"]
    print(f"{watched_job['how']}: {len(listening)} listening sockets in {watched_job['seconds']:.0f} s")
    for key, name in sorted(listening.items()):
        print(f"  {key}  {name}")
    exposed = {k: v for k, v in listening.items() if not ipaddress.ip_address(k.split()[0]).is_loopback}
    assert not exposed, f"non-loopback listeners: {exposed}"
    ports = {int(k.split()[1]) for k in listening}
    # The watcher saw the job's listeners: every server, the store, and more
    # (each trainer's and sampler's DGL receiver, gloo), so an empty list cannot pass.
    servers = {p + s for p in watched_job["ports"] for s in range(2)}
    assert servers <= ports and int(watched_job["master_port"]) in ports
    assert len(listening) >= len(servers) + 1 + 2 * 2
    assert watched_job["env"]["GLOO_SOCKET_IFNAME"] == launcher.loopback_interface()


def test_the_watched_job_trained(watched_job):
    """The sockets were those of a job that worked: rank 0 trained three epochs
    (2 servers per machine, sampler processes), its loss going down."""
    assert watched_job["error"] is None, watched_job["error"] + watched_job["log"][-3000:]
    losses = [float(line.split()[3]) for line in watched_job["log"].splitlines() if line.startswith("epoch ")]
    assert len(losses) == 3 and losses[2] < losses[0], losses


def test_two_servers_per_machine_train(cora2):
    with LocalCluster(cora2, num_trainers=1, num_servers=2, deadline_s=200) as cluster:
        result = cluster.train(TrainConfig(epochs=2))
        names = [p.name for p in cluster.last_plan.processes]
    assert [n for n in names if n.startswith("server")] == ["server-m0-s0", "server-m0-s1", "server-m1-s0",
                                                            "server-m1-s1"]
    assert result["world_size"] == 2 and result["epochs_run"] == 2
    assert result["steps_per_trainer"][0] == result["steps_per_trainer"][1] == 2 * result["steps_per_epoch"]
    assert result["feature_rows"]["remote_fraction"] > 0 and result["test_acc"] > 0.3


def _listening(ip: str = "127.0.0.1", family: int = socket.AF_INET) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.bind((ip, 0))
    sock.listen(1)
    return sock


def test_port_checks_see_wildcard_and_ipv6_listeners():
    with _listening("0.0.0.0") as any4:
        port = any4.getsockname()[1]
        assert not port_is_free("127.0.0.1", port) and not port_is_free("", port) and not port_is_free("::", port)
    try:
        any6 = _listening("::", socket.AF_INET6)
    except OSError:
        pytest.skip("no IPv6 here")
    with any6:
        port = any6.getsockname()[1]
        assert not port_is_free("::", port) and not port_is_free("127.0.0.1", port)
    with _listening("127.0.0.1") as lo:
        port = lo.getsockname()[1]
        assert not port_is_free("127.0.0.1", port) and not port_is_free("::", port)
    assert port_is_free("127.0.0.1", port) and port_is_free("::", port)  # closed again


def test_taken_master_port_is_refused_at_planning(cora2, tmp_path):
    with _listening() as busy:
        port = busy.getsockname()[1]
        with pytest.raises(LaunchError, match=f"port {port} on 127.0.0.1 .*MASTER_PORT.* already taken"):
            plan_job(cora2, ["python", "x.py"], master_port=port, workdir=tmp_path)


def test_store_port_taken_after_planning_fails_naming_it(cora2, tmp_path):
    plan = plan_job(cora2, ["python", "-c", "import time; time.sleep(60)"], workdir=tmp_path, private_network=False)
    port = int(plan.processes[0].argv[plan.processes[0].argv.index("--port") + 1])
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", port))
        busy.listen(1)
        start = time.monotonic()
        with pytest.raises(JobFailed) as failure:
            with Job(plan, deadline_s=60) as job:
                job.wait()
    assert time.monotonic() - start < 20
    assert failure.value.name == "store" and f"port {port} on 127.0.0.1 is already taken" in str(failure.value)
    assert launcher.port_clash(failure.value) == port


PLAIN_GLOO = textwrap.dedent("""
    import os, sys, torch, dgl
    dgl.distributed.initialize(os.environ["DGL_IP_CONFIG"])
    torch.distributed.init_process_group("gloo")
    total = torch.tensor([1])
    torch.distributed.all_reduce(total)
    print("world", int(total))
""")


@pytest.mark.parametrize("victim,call", [("store", 2), ("server-m0-s0", 0)])
def test_port_clash_is_retried_with_fresh_ports(cora2, tmp_path, monkeypatch, capfd, victim, call):
    """The first plan's MASTER_PORT (the store's, for gloo's rendezvous) or a
    server's port is taken when the job starts: that process fails to listen,
    the job is started again with fresh ports and runs."""
    script = tmp_path / "plain.py"
    script.write_text(PLAIN_GLOO)
    busy = _listening()
    taken = busy.getsockname()[1]
    real = launcher.free_port_block
    calls = []

    def one_port_taken(count, *args, **kwargs):  # plan_job asks for machine 0's, machine 1's, then the master port
        calls.append(count)
        return taken if len(calls) == call + 1 else real(count, *args, **kwargs)

    monkeypatch.setattr(launcher, "free_port_block", one_port_taken)
    try:
        with LocalCluster(cora2, deadline_s=120, workdir=tmp_path / "w", private_network=False) as cluster:
            codes = cluster.run([sys.executable, str(script)])
            assert cluster.jobs == 2 and str(taken) not in cluster.last_plan.ip_config.read_text()
            assert cluster.last_plan.processes[0].argv[-3] != str(taken)
            logs = cluster.last_plan.workdir / "logs"
    finally:
        busy.close()
    assert set(codes.values()) == {0}
    assert f"port {taken} was taken when '{victim}' started; starting the job again" in capfd.readouterr().err
    assert "world 2" in (logs / "trainer-m1-r0.log").read_text()
    assert "clients came and went, no server listens; done" in (logs / "store.log").read_text()  # not killed


def test_port_clash_gives_up_after_bounded_retries(cora2, tmp_path, monkeypatch):
    busy = _listening()
    taken = busy.getsockname()[1]
    real = launcher.free_port_block
    monkeypatch.setattr(launcher, "free_port_block",
                        lambda count, *a, **k: taken if count == 1 else real(count, *a, **k))
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    start = time.monotonic()
    try:
        with LocalCluster(cora2, deadline_s=60, workdir=tmp_path / "w", private_network=False) as cluster:
            with pytest.raises(JobFailed, match=f"port {taken} was taken .* 1 more starts"):
                launcher.run_with_fresh_ports(lambda: cluster.start(sleeper), retries=1)
            assert cluster.jobs == 2
    finally:
        busy.close()
    assert time.monotonic() - start < 30


@pytest.mark.parametrize("address", ["127.1", "1.2.3", "0x7f.0.0.1", "127.0.0.01", "010.0.0.7", "256.0.0.1",
                                     "10.0.0.7.", "0.0.0.0", "224.0.0.1", "::1", "host.example"])
def test_host_file_takes_canonical_ipv4_only(tmp_path, address):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text(f"10.0.0.1 30050\n{address} 30050\n")
    with pytest.raises(LaunchError, match=f"hosts.txt:2: '{address}' is not a canonical IPv4 address"):
        read_host_file(hosts)


@pytest.mark.parametrize("port", ["0", "65536", "+30050", "3_0050", "x"])
def test_host_file_ports(tmp_path, port):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text(f"10.0.0.1 {port}\n")
    with pytest.raises(LaunchError, match="PORT 1..65535"):
        read_host_file(hosts)
    hosts.write_text("10.0.0.1 30050 # machine 0\n\n10.0.0.2\n")
    assert read_host_file(hosts) == [("10.0.0.1", 30050), ("10.0.0.2", None)]


def test_cluster_plan_checks_the_ports_of_this_host(cora2, tmp_path):
    """A host file naming this host: its taken server port is refused at planning."""
    with _listening() as busy:
        port = busy.getsockname()[1]
        with pytest.raises(LaunchError, match=f"port {port} on 127.0.0.1 .*this host.* already taken"):
            plan_job(cora2, ["python", "x.py"], mode="cluster", hosts=[("127.0.0.1", port), ("10.255.0.2", 30050)],
                     workdir=tmp_path)


def test_local_plan_puts_everything_on_loopback(cora2, tmp_path):
    plan = plan_job(cora2, ["python", "x.py"], num_trainers=2, workdir=tmp_path)
    assert [m.ip for m in plan.machines] == ["127.0.0.1"] * 2
    store = plan.processes[0]
    assert store.role == "store" and store.argv[store.argv.index("--host") + 1] == "127.0.0.1"
    for p in plan.processes[1:]:
        assert p.env["GLOO_SOCKET_IFNAME"] == launcher.loopback_interface()
        if p.role == "trainer":
            assert p.env["MASTER_ADDR"] == "127.0.0.1" and p.env["TORCHELASTIC_USE_AGENT_STORE"] == "True"
            assert p.env["MASTER_PORT"] == store.argv[store.argv.index("--port") + 1]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("capsh") is None,
                    reason="needs root and capsh to drop a capability")
@pytest.mark.parametrize("capability", ["cap_net_admin", "cap_sys_admin"])
def test_netns_unavailable_names_the_missing_capability(capability):
    """Root without CAP_NET_ADMIN (a default container): the netns tests skip with this reason."""
    code = "from gnnbook.distributed.netns import netns_available; print(netns_available())"
    done = subprocess.run(["capsh", f"--drop={capability}", "--", "-c", 'exec "$0" -c "$1"', sys.executable, code],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"need {capability.upper()}, which this root process lacks" in done.stdout
