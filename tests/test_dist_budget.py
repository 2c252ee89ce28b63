"""A memory budget per emulated machine (issue 24, item 2): a machine over it
fails the job by name, with its peak, and leaves nothing behind; a job within
it trains and reports each machine's peak.  Real DistDGL jobs on Cora (2
machines x 1 trainer, 1 epoch: about 15 s each)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gnnbook.base.budget import cgroup_support
from gnnbook.distributed.cluster import LocalCluster
from gnnbook.distributed.config import TrainConfig
from gnnbook.distributed.launcher import LaunchError
from gnnbook.distributed.leftovers import own_job_prefix
from gnnbook.distributed.partition_cache import partition_dataset

MODE, WHY = cgroup_support()


@pytest.fixture(scope="module")
def cora2(tmp_path_factory) -> Path:
    return partition_dataset("cora", 2, "random", tmp_path_factory.mktemp("budget") / "cora2")


def leftovers(pid: int) -> set[str]:
    """What a budgeted job launched by process ``pid`` could leave: its cgroups and its shared-memory
    segments (both named after the launching process, so that jobs running beside this test do not count)."""
    cgroups = {str(p) for p in Path("/sys/fs/cgroup").glob(f"**/gnnbook-{pid}-*") if p.is_dir()}
    return cgroups | {p.name for p in Path("/dev/shm").iterdir() if p.name.startswith(own_job_prefix(pid))}


def test_a_machine_over_its_budget_is_named_and_the_job_stopped_cleanly(cora2, tmp_path):
    # 200 MiB: less than one Python process that has imported torch and DGL.
    job = subprocess.Popen([sys.executable, "-m", "gnnbook", "dist-train", "--part-config", str(cora2), "--epochs", "1",
                            "--no-baseline", "--machine-memory", "200MiB", "--workdir", str(tmp_path / "w")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = job.communicate(timeout=300)
    finally:
        job.kill()
    assert job.returncode == 1 and "Traceback" not in stderr, stderr[-2000:]
    assert "exceeded its 200 MiB budget (peak " in stderr, stderr[-2000:]
    assert ("killed by the kernel" if MODE != "measured" else "measured, not enforced") in stderr
    assert not leftovers(job.pid), leftovers(job.pid)


def test_a_job_within_its_budget_trains_and_reports_each_machines_peak(cora2, tmp_path):
    with LocalCluster(cora2, machine_memory="4GiB", workdir=tmp_path) as cluster:
        result = cluster.train(TrainConfig(epochs=1))
    machines = result["machine_memory"]
    assert [m["name"] for m in machines] == ["machine 0", "machine 1"] and {m["mode"] for m in machines} == {MODE}
    for m in machines:  # a server and a trainer, each with torch and DGL loaded: well above 100 MiB
        assert 100 * 2**20 < m["peak_bytes"] < m["limit_bytes"] == 4 * 2**30 and m["oom_kills"] == 0
    assert not leftovers(os.getpid()), leftovers(os.getpid())


def test_a_budget_is_refused_for_a_real_cluster(cora2, tmp_path):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("10.1.0.11\n10.1.0.12\n")
    from gnnbook.distributed.cluster import Cluster

    with Cluster(cora2, hosts, machine_memory="2GiB", workdir=tmp_path / "w") as cluster:
        with pytest.raises(LaunchError, match="leave out --machine-memory with --hosts"):
            cluster.train(TrainConfig(epochs=1))
