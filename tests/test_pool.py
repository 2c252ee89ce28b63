"""gnnbook.base.pool: ranks started once, reused job after job, with run()'s guarantees (a failed
rank named and every rank stopped, deadlines, nothing left running).  Each test starts 2 ranks."""
from __future__ import annotations

import time

import psutil
import pytest

from gnnbook.base.pool import RankPool
from gnnbook.base.procs import ProcessFailed


def children() -> list[int]:
    return [p.pid for p in psutil.Process().children(recursive=True) if p.is_running() and p.status() != "zombie"]


def test_jobs_run_in_the_same_processes_in_rank_order():
    before = children()
    with RankPool(world_size=2, deadline_s=120) as pool:
        first = pool.run("gnnbook.base.worker:rank_and_pid")
        second = pool.run("gnnbook.base.worker:rank_and_size")
        third = pool.run("gnnbook.base.worker:rank_and_pid")
        work = pool._work
    assert [r["rank"] for r in first] == [0, 1] and third == first      # the same two processes, three jobs
    assert len({r["pid"] for r in first}) == 2 and [r["world_size"] for r in second] == [2, 2]
    assert pool.closed and not work.exists() and children() == before


def test_a_failed_rank_is_named_and_the_pool_stops():
    before = children()
    pool = RankPool(world_size=2, deadline_s=120)
    assert pool.run("gnnbook.base.worker:rank_and_size")[1]["rank"] == 1
    start = time.monotonic()
    with pytest.raises(ProcessFailed, match="rank1") as failed:
        pool.run("gnnbook.base.worker:fail_on_rank", {"rank": 1})
    assert "injected failure on rank 1" in str(failed.value) and time.monotonic() - start < 30
    assert pool.closed and children() == before
    with pytest.raises(RuntimeError, match="closed"):
        pool.run("gnnbook.base.worker:rank_and_size")


def test_a_job_past_its_deadline_is_stopped():
    before = children()
    pool = RankPool(world_size=2, deadline_s=120)
    start = time.monotonic()
    with pytest.raises(ProcessFailed, match="deadline of 3 s"):
        pool.run("gnnbook.base.worker:fail_on_rank", {"rank": 0, "how": "hang"}, deadline_s=3)
    assert time.monotonic() - start < 30 and pool.closed and children() == before


def test_arguments_that_are_not_json_are_refused_before_the_job():
    with RankPool(world_size=2, deadline_s=120) as pool:
        with pytest.raises(TypeError):
            pool.run("gnnbook.base.worker:rank_and_size", {"x": object()})
        with pytest.raises(ValueError, match="package.module:function"):
            pool.run("not a spec")
        assert pool.run("gnnbook.base.worker:rank_and_size")[0]["rank"] == 0    # the pool still works
