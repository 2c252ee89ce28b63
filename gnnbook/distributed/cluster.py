"""The notebook API: a DistDGL cluster as a context manager.

``LocalCluster`` places one emulated machine per partition on this host
(``mode="local"``, no root needed; or ``mode="netns"``, one network namespace
per machine, root only); ``Cluster`` takes a host file and starts everything
over ssh.  Both run :mod:`gnnbook.distributed.trainer` with :meth:`train` or any
DistDGL script with :meth:`run`, and leave nothing behind: on leaving the
``with`` block (or on any failure) every process is gone, the job's
shared-memory segments are removed, and namespaces are torn down.

Example:
    >>> from gnnbook.distributed import LocalCluster, TrainConfig, cached_partition
    >>> config = cached_partition("cora", 2)                                    # doctest: +SKIP
    >>> with LocalCluster(config, num_trainers=2) as cluster:                   # doctest: +SKIP
    ...     result = cluster.train(TrainConfig(epochs=20))
    >>> result["test_acc"] > 0.7                                                # doctest: +SKIP
    True
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .config import TrainConfig
from .launcher import Job, JobPlan, LaunchError, plan_job, read_host_file, render
from .partition import read_config


class LocalCluster:
    """``num_trainers`` trainers and ``num_servers`` servers per partition of
    ``part_config``, each partition an emulated machine of this host."""

    mode = "local"

    def __init__(self, part_config: str | Path, num_trainers: int = 1, num_servers: int = 1, num_samplers: int = 0,
                 deadline_s: float = 600.0, workdir: str | Path | None = None, mode: str = "local",
                 keep_workdir: bool = False, hosts: list[tuple[str, int | None]] | None = None):
        read_config(part_config)  # fail now, with a clear message, on a bad config
        for label, value in (("num_trainers", num_trainers), ("num_servers", num_servers)):
            if not isinstance(value, int) or value < 1:
                raise LaunchError(f"{label} must be a positive integer, got {value!r}")
        self.part_config = Path(part_config).resolve()
        self.num_trainers, self.num_servers, self.num_samplers = num_trainers, num_servers, num_samplers
        self.deadline_s = deadline_s
        self.mode = mode
        self.hosts = hosts
        self._own_workdir = workdir is None
        self._workdir = Path(workdir) if workdir else None
        self.keep_workdir = keep_workdir
        self._namespaces = None
        self.last_plan: JobPlan | None = None
        self.jobs = 0

    @property
    def workdir(self) -> Path:
        """Job folders (ip_config, logs, results); a temporary one unless given."""
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="gnnbook-cluster-"))
        return self._workdir

    def __enter__(self) -> "LocalCluster":
        if self.mode == "netns":
            from .netns import EmulatedHosts

            num_parts = int(read_config(self.part_config)["num_parts"])
            self._namespaces = EmulatedHosts(num_parts).__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._namespaces is not None:
            self._namespaces.__exit__(*exc)
            self._namespaces = None
        if self._own_workdir and not self.keep_workdir and self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def plan(self, command: list[str], workdir: Path | None = None) -> JobPlan:
        """What :meth:`run` would start (see :func:`gnnbook.distributed.launcher.render`)."""
        self.jobs += 1
        return plan_job(self.part_config, command, self.num_trainers, self.num_servers, self.num_samplers,
                        mode=self.mode, hosts=self.hosts, workdir=workdir or self.workdir / f"job{self.jobs}",
                        netns_machines=self._namespaces.machines if self._namespaces else None)

    def start(self, command: list[str]) -> Job:
        """Start a job and return it running (for tests that kill a process);
        use it as a context manager so that it is always stopped."""
        self.last_plan = self.plan(command)
        return Job(self.last_plan, self.deadline_s).start()

    def run(self, command: list[str]) -> dict[str, int]:
        """Run any DistDGL script (``[python, script.py, args...]``) on the cluster;
        return every process's exit code or raise :class:`~gnnbook.distributed.launcher.JobFailed`."""
        with self.start(command) as job:
            return job.wait()

    def trainer_command(self, config: TrainConfig) -> list[str]:
        return [sys.executable, "-m", "gnnbook.distributed.trainer", "--part-config", str(self.part_config), *config.to_argv()]

    def train(self, config: TrainConfig | dict[str, Any] | None = None) -> dict[str, Any]:
        """Run the gnnbook trainer; return its JSON result (plus ``wall_seconds``)."""
        config = config if isinstance(config, TrainConfig) else TrainConfig(**(config or {}))
        out = self.workdir / f"result{self.jobs + 1}.json"
        config = TrainConfig(**{**config.to_dict(), "out": str(out)})
        out.unlink(missing_ok=True)  # a reused workdir's old result must never pass for this job's
        start = time.perf_counter()
        self.run(self.trainer_command(config))
        if not out.is_file():
            raise LaunchError(f"the job ended without error but its trainer wrote no result ({out})")
        result = json.loads(out.read_text())
        result["wall_seconds"] = time.perf_counter() - start
        return result

    def dry_run(self, config: TrainConfig | None = None) -> str:
        return render(self.plan(self.trainer_command(config or TrainConfig())))


class Cluster(LocalCluster):
    """The same over ssh: one machine per line of ``host_file`` (``IP [PORT]``).

    The partition folder, this working directory and the Python environment
    must be at the same paths on every host (a shared file system), as with
    DGL's own launcher."""

    def __init__(self, part_config: str | Path, host_file: str | Path, **options: Any):
        options.setdefault("workdir", Path.cwd() / "gnnbook-jobs")
        super().__init__(part_config, mode="cluster", hosts=read_host_file(host_file), **options)
