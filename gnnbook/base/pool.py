"""Ranks started once and given one job after another, so that each section of a notebook runs its
experiment where its text explains it.

Book: 3.2 the distributed training flow (the same ranks, reused).

Used in: chapters/03_distributed_ml.ipynb, chapters/06b_operator_parallelism.ipynb,
chapters/06c_sync_and_async_protocols.ipynb.

:func:`gnnbook.base.launch.run` starts ``world_size`` processes for one function and stops
them.  Start-up costs seconds (every rank imports torch), so a notebook with an experiment in
every section either pays it per section or batches its experiments into one launch, far from
the text that explains them.  A :class:`RankPool` keeps the ranks between jobs: each
:meth:`RankPool.run` is one job, started in every rank after a barrier, its per-rank results
returned in rank order, exactly as :func:`~gnnbook.base.launch.run` returns them.

The pool keeps ``run``'s guarantees.  It has one deadline for its whole life and one per job;
the first rank that fails stops every rank and raises :class:`~gnnbook.base.procs.ProcessFailed`
naming it; :meth:`RankPool.close` (also called at interpreter exit, and done by the group's
watchdog if the launching process is killed) leaves nothing running.  Jobs reach the ranks
through the launcher's store (a JSON function spec and arguments); results come back as files
written with ``torch.save`` and read with ``torch.load(weights_only=True)``.

Example:
    >>> with RankPool(world_size=2, deadline_s=120) as pool:
    ...     first = pool.run("gnnbook.base.worker:rank_and_size")
    ...     again = pool.run("gnnbook.base.worker:rank_and_size")
    >>> [r["rank"] for r in first], again == first
    ([0, 1], True)
"""
from __future__ import annotations

import atexit
import datetime
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import worker
from .launch import PEER_EXIT_GRACE_S, check_spec, start_ranks
from .procs import ProcessFailed, ProcessGroup
from .records import from_plain, to_plain

__all__ = ["RankPool", "serve"]

_JOB, _DONE = "gnnbook/pool/job{}", "gnnbook/pool/done{}"


class RankPool:
    """``world_size`` ranks joined by torch.distributed (gloo), alive until :meth:`close` or
    ``deadline_s`` seconds after they were started; ``threads_per_rank`` as in ``run``."""

    def __init__(self, world_size: int, deadline_s: float = 600.0, threads_per_rank: int = 1,
                 log_dir: str | Path | None = None, env: dict[str, str] | None = None):
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        import torch.distributed as dist

        self.world_size, self.jobs = world_size, 0
        self._work = Path(tempfile.mkdtemp(prefix="gnnbook-pool-"))
        self._store = dist.TCPStore("127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False)
        self._group = ProcessGroup(deadline_s=deadline_s, log_dir=log_dir or self._work / "logs",
                                   peer_exit_grace_s=PEER_EXIT_GRACE_S)
        self._group.remove_on_death(self._work)
        (self._work / "args.json").write_text(json.dumps({"work": str(self._work)}))
        start_ranks(self._group, "gnnbook.base.pool:serve", world_size, self._work / "args.json",
                    self._work / "served{rank}.pt", self._store.port, deadline_s, threads_per_rank, env=env)
        self.closed = False
        atexit.register(self.close)

    def run(self, fn: str, args: dict[str, Any] | None = None, deadline_s: float | None = None) -> list[Any]:
        """Call ``fn(**args)`` in every rank (a barrier first); return the per-rank results, rank order.
        Raises :class:`ProcessFailed` (and the pool is closed) when a rank fails or the job outlives
        ``deadline_s`` (default: what is left of the pool's deadline)."""
        if self.closed:
            raise RuntimeError("this RankPool is closed (closed by hand, or a job failed): start a new one")
        check_spec(fn)
        job = json.dumps([fn, args or {}])  # fails here, clearly, on arguments that are not JSON
        end = min(self._group.deadline, time.monotonic() + (deadline_s or float("inf")))
        n, self.jobs = self.jobs, self.jobs + 1
        self._store.set(_JOB.format(n), job)
        try:
            while self._store.add(_DONE.format(n), 0) < self.world_size:
                self._group.check()  # a failed rank or the pool's deadline: ProcessFailed
                if time.monotonic() > end:
                    running = ", ".join(f"rank{r}" for r in range(self.world_size))
                    self._group.dump_stacks()
                    self._group.kill()
                    raise ProcessFailed("rank0", None, self._group.log("rank0")[-3000:],
                                        f"job {fn} passed its deadline of {deadline_s:.0f} s; stopped {running}")
                time.sleep(0.01)
        except BaseException:
            self._shut()
            raise
        import torch

        paths = [self._work / f"job{n}-rank{rank}.pt" for rank in range(self.world_size)]
        results = [from_plain(torch.load(path, weights_only=True)) for path in paths]
        for path in paths:
            path.unlink()
        return results

    def close(self) -> None:
        """Tell the ranks to leave, wait for them (until the pool's deadline), remove what the pool made."""
        if self.closed:
            return
        try:
            self._store.set(_JOB.format(self.jobs), json.dumps([None, {}]))
            self._group.wait()
        finally:
            self._shut()

    def _shut(self) -> None:
        if self.closed:
            return
        self.closed = True
        atexit.unregister(self.close)
        try:
            self._group.__exit__(None, None, None)  # kills what is left, removes shared memory, disarms
        finally:
            shutil.rmtree(self._work, ignore_errors=True)
            del self._store

    def __enter__(self) -> "RankPool":
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.close()
        else:
            self._shut()


def serve(work: str) -> None:
    """A pool's rank: run job ``N`` = 0, 1, 2, ... as the store hands them out, until told to stop."""
    import torch
    import torch.distributed as dist

    # a connection of its own to the launcher's store (the rank's group holds another)
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=datetime.timedelta(seconds=float(os.environ["GNNBOOK_DEADLINE_S"])))
    rank = dist.get_rank()
    for n in range(sys.maxsize):
        store.wait([_JOB.format(n)])  # at most the pool's deadline (the store's timeout)
        spec, args = json.loads(store.get(_JOB.format(n)))
        if spec is None:
            return
        dist.barrier()
        result = worker.load_function(spec)(**args)
        path = Path(work) / f"job{n}-rank{rank}.pt"
        torch.save(to_plain(result), path.with_suffix(".tmp"))
        path.with_suffix(".tmp").rename(path)  # whole or absent
        store.add(_DONE.format(n), 1)
