"""The notebook API: a DistDGL cluster as a context manager.

Book: 8.3.3 several trainers on one machine; 8.3.4 cluster training.

Used in: chapters/05a_minibatch_training_and_sampling.ipynb, chapters/05f_distributed_cache.ipynb,
chapters/08_dgl_practice.ipynb.

``LocalCluster`` places one emulated machine per partition on this host
(``mode="local"``, no root needed; or ``mode="netns"``, one network namespace
per machine, root only); ``Cluster`` takes a host file and starts everything
over ssh.  Both run :mod:`gnnbook.distributed.trainer` with :meth:`train` or any
DistDGL script with :meth:`run`, and leave nothing behind: on leaving the
``with`` block (or on any failure) every process is gone, the job's
shared-memory segments are removed, and namespaces are torn down; if the
process that runs the cluster is killed (a restarted notebook kernel), the
job's watchdog (:mod:`gnnbook.base.reaper`) does the same.  The folder of a job
that failed is kept, and its path printed, so that its logs can be read.
Each job has a folder of its own (``job<N>-<random>``), so that jobs sharing
a working directory (``Cluster``'s ``./gnnbook-jobs``) never overwrite each other.

The default deadline of :meth:`train` grows with the work
(:func:`default_deadline_s`); :meth:`run` cannot know it and waits 600 s.

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
import math
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..base import reaper
from ..base.budget import parse_bytes
from .config import TrainConfig
from .emulation import preflight
from .launcher import Job, JobPlan, LaunchError, plan_job, read_host_file, render, run_with_fresh_ports
from .partition_files import OpenedPartition, open_partition
from .progress import EpochProgress
from .repeatable import check_repeatable

RUN_DEADLINE_S = 600.0  # any script: its work is unknown
# The trainer's deadline: start-up of servers and trainers plus, per epoch,
# evaluation and the training steps.  Measured on a loaded 2-core machine:
# start-up ~40 s, ~5 s an epoch of 9 steps with one sampler each (Cora,
# 2 machines x 2 trainers); these allow about 3x that.
START_S, EPOCH_S, STEP_S = 120.0, 5.0, 1.0


def default_deadline_s(part_config: str | Path | OpenedPartition, config: TrainConfig, world_size: int) -> float:
    """START_S + runs x epochs x (EPOCH_S + STEP_S x steps per epoch), the steps
    counted from the partitions' training nodes as the trainer splits them.

    Example:
        >>> default_deadline_s("cora2/cora.json", TrainConfig(epochs=20), 4)  # 9 steps an epoch  # doctest: +SKIP
        400.0
    """
    train = open_partition(part_config).train_nodes or 0
    steps = math.ceil(train / max(1, world_size) / config.batch_size)
    return START_S + config.runs * config.epochs * (EPOCH_S + STEP_S * steps)


class LocalCluster:
    """``num_trainers`` trainers and ``num_servers`` servers per partition of
    ``part_config``, each partition an emulated machine of this host.

    More than 8 parameters: one per option of DGL's ``launch.py`` that a job sets (trainers, servers, samplers,
    hosts) and per guarantee of the emulation (deadline, memory per machine, private network, work folder).
    """

    mode = "local"

    def __init__(self, part_config: str | Path | OpenedPartition, num_trainers: int = 1, num_servers: int = 1,
                 num_samplers: int = 0, deadline_s: float | None = None, workdir: str | Path | None = None,
                 mode: str = "local", keep_workdir: bool = False, hosts: list[tuple[str, int | None]] | None = None,
                 machine_memory: int | str | None = None, private_network: bool | None = None):
        # Read and checked once, here: a bad config fails now, with a clear message.
        self.partition = open_partition(part_config)
        self.machine_memory = None if machine_memory is None else parse_bytes(machine_memory)
        for label, value in (("num_trainers", num_trainers), ("num_servers", num_servers)):
            if not isinstance(value, int) or value < 1:
                raise LaunchError(f"{label} must be a positive integer, got {value!r}")
        self.part_config = self.partition.config_path.resolve()
        self.num_trainers, self.num_servers, self.num_samplers = num_trainers, num_servers, num_samplers
        self.deadline_s = deadline_s
        self.mode = mode
        self.hosts = hosts
        self.private_network = private_network  # local mode: see plan_job (None: where the kernel allows)
        self._own_workdir = workdir is None
        self._workdir = Path(workdir) if workdir else None
        self.keep_workdir = keep_workdir
        self._namespaces = None
        self._watchdog: reaper.Watchdog | None = None  # netns mode: undoes the namespaces if this process dies
        self.last_plan: JobPlan | None = None
        self.jobs = 0
        self.started: list[Job] = []

    @property
    def workdir(self) -> Path:
        """Job folders (ip_config, logs, results); a temporary one unless given."""
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="gnnbook-cluster-"))
        return self._workdir

    def __enter__(self) -> "LocalCluster":
        if self.mode == "netns":
            from .netns import EmulatedHosts

            # A watchdog of the cluster's own, not only each job's: a kill between two jobs
            # (or before the first) still removes the namespaces, bridge and mounts.
            self._watchdog = reaper.Watchdog(reaper.new_tag())
            self._namespaces = EmulatedHosts(self.partition.num_parts).__enter__()
            for command in self._namespaces.undo_commands():  # the watchdog runs them in reverse
                self._watchdog.undo_on_death(command)
        return self

    def __exit__(self, *exc) -> None:
        if self._namespaces is not None:
            self._namespaces.__exit__(*exc)
            self._namespaces = None
        if self._watchdog is not None:
            self._watchdog.close()
            self._watchdog = None
        if self._own_workdir and not self.keep_workdir and self._workdir is not None:
            kept = {job.plan.workdir.resolve() for job in self.started if job.failed}
            for folder in sorted(kept):
                print(f"logs of the failed job kept in {folder / 'logs'}", file=sys.stderr)
            if not kept:
                shutil.rmtree(self._workdir, ignore_errors=True)
            for entry in list(self._workdir.iterdir()) if kept else []:
                if entry.resolve() in kept:
                    continue
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
            self._workdir = None

    def new_job_dir(self) -> Path:
        """A fresh folder for the next job: ``job<N>-<random>`` in :attr:`workdir`."""
        self.jobs += 1
        self.workdir.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f"job{self.jobs}-", dir=self.workdir))

    def plan(self, command: list[str], workdir: Path | None = None) -> JobPlan:
        """What :meth:`run` would start (see :func:`gnnbook.distributed.launcher.render`), with the
        placeholders of :func:`~gnnbook.distributed.launcher.fill_placeholders` in ``command`` filled."""
        return plan_job(self.partition, command, self.num_trainers, self.num_servers, self.num_samplers,
                        mode=self.mode, hosts=self.hosts, workdir=workdir or self.new_job_dir(),
                        netns_machines=self._namespaces.machines if self._namespaces else None,
                        private_network=self.private_network)

    def start(self, command: list[str], workdir: Path | None = None, deadline_s: float | None = None) -> Job:
        """Start a job and return it running (for tests that kill a process);
        use it as a context manager so that it is always stopped.  In a local job
        the trainers' interpreter is first checked for the emulation adaptation
        (:func:`~gnnbook.distributed.emulation.preflight`): nothing starts without it."""
        self.last_plan = self.plan(command, workdir)
        if self.last_plan.mode == "local":
            trainer = next(p for p in self.last_plan.processes if p.role == "trainer")
            preflight(trainer.argv, trainer.env)
        job = Job(self.last_plan, deadline_s or self.deadline_s or RUN_DEADLINE_S, machine_memory=self.machine_memory)
        # If this process is killed, the watchdog removes what __exit__ would have.
        if self._own_workdir and not self.keep_workdir:
            job.group.remove_on_death(self.workdir)
        for command in self._namespaces.undo_commands() if self._namespaces else []:
            job.group.undo_on_death(command)
        self.started.append(job)
        return job.start()

    def run(self, command: list[str], workdir: Path | None = None, deadline_s: float | None = None) -> dict[str, int]:
        """Run any DistDGL script (``[python, script.py, args...]``) on the cluster;
        return every process's exit code or raise :class:`~gnnbook.distributed.launcher.JobFailed`
        (the job's folder, with its logs, is then kept and its path printed).  A port taken
        meanwhile by something else: the job starts again with fresh ports."""
        return run_with_fresh_ports(lambda: self.start(command, workdir, deadline_s))

    def trainer_command(self, config: TrainConfig) -> list[str]:
        return [sys.executable, "-m", "gnnbook.distributed.trainer", "--part-config", str(self.part_config),
                *config.to_argv()]

    def train(self, config: TrainConfig | dict[str, Any] | None = None, progress: bool = False) -> dict[str, Any]:
        """Run the gnnbook trainer; return its JSON result (plus ``wall_seconds``).
        Without a ``deadline_s``, the deadline is :func:`default_deadline_s`.  ``progress``: a bar of
        the epochs as rank 0 logs them, with the time left before the deadline (:mod:`.progress`)."""
        config = config if isinstance(config, TrainConfig) else TrainConfig(**(config or {}))
        folder = self.new_job_dir()
        out = folder / "result.json"
        out.unlink(missing_ok=True)  # a reused folder's old result must not pass for this job's
        config = TrainConfig(**{**config.to_dict(), "out": str(out)})
        num_parts = self.partition.num_parts
        if config.repeatable_sampling:  # refused before anything starts, not inside the trainers
            check_repeatable(num_parts, self.num_trainers, self.num_servers, self.num_samplers)
        world = self.num_trainers * num_parts
        deadline = self.deadline_s or default_deadline_s(self.partition, config, world)
        start = time.perf_counter()
        with EpochProgress(folder / "logs" / "trainer-m0-r0.log", config.epochs, deadline, enabled=progress,
                           runs=config.runs):
            self.run(self.trainer_command(config), folder, deadline)
        if not out.is_file():
            raise LaunchError(f"the job ended without error but its trainer wrote no result ({out})")
        result = json.loads(out.read_text())
        result["wall_seconds"] = time.perf_counter() - start
        if self.machine_memory is not None:  # each machine's budget and measured peak
            result["machine_memory"] = [asdict(r) for r in self.started[-1].reports]
        return result

    def dry_run(self, config: TrainConfig | None = None) -> str:
        return render(self.plan(self.trainer_command(config or TrainConfig())))


class Cluster(LocalCluster):
    """The same over ssh: one machine per line of ``host_file`` (``IP [PORT]``).

    The partition folder, this working directory and the Python environment
    must be at the same paths on every host (a shared file system), as with
    DGL's own launcher."""

    def __init__(self, part_config: str | Path | OpenedPartition, host_file: str | Path, **options: Any):
        options.setdefault("workdir", Path.cwd() / "gnnbook-jobs")
        super().__init__(part_config, mode="cluster", hosts=read_host_file(host_file), **options)
