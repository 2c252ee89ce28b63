"""Pipelining across minibatches (gnnbook.ch5_minibatch.prefetch): the pipelined loop sees
the serial loop's minibatches, its timeline shows the overlap (and the bound
of the queue), and a dying producer stops the loop with a clear error and
leaves nothing behind.  No timing thresholds: only orderings of recorded events."""
from __future__ import annotations

import os
import shutil
import signal

import pytest
import torch

from gnnbook.base import reaper
from gnnbook.data import load_dataset
from gnnbook.base.procs import ProcessFailed
from gnnbook.ch5_minibatch.pipelining import compare_loops, run_loop
from gnnbook.ch5_minibatch.prefetch import PrefetchingLoader, SerialLoader

FANOUTS, BATCH = [5, 5], 64


@pytest.fixture(scope="module")
def cora():
    return load_dataset("cora")


@pytest.fixture(scope="module")
def nodes(cora):
    return torch.randperm(cora.num_nodes(), generator=torch.Generator().manual_seed(1))[:320]


def _left_behind(tag: str) -> tuple[list[int], list[str]]:
    shm = sorted(p.name for p in reaper.SHM_DIR.iterdir() if tag in p.name) if reaper.SHM_DIR.is_dir() else []
    return reaper.job_pids(tag), shm


@pytest.fixture(scope="module")
def runs(cora, nodes):
    """One serial and one pipelined run of 2 epochs, same seed."""
    serial = run_loop(SerialLoader(cora, nodes, FANOUTS, BATCH, epochs=2, seed=3), cora, hidden=16,
                      keep_batches=True)
    with PrefetchingLoader(cora, nodes, FANOUTS, BATCH, epochs=2, seed=3, depth=2, deadline_s=240) as loader:
        pipelined = run_loop(loader, cora, hidden=16, keep_batches=True)
        tag = loader.tag
    return serial, pipelined, tag


@pytest.mark.timeout(300)
def test_pipelined_loop_sees_the_SerialLoader(runs, cora, nodes):
    serial, pipelined, _ = runs
    steps = [(s["epoch"], s["step"]) for s in serial.timeline]
    assert steps == [(s["epoch"], s["step"]) for s in pipelined.timeline]
    assert len(steps) == 2 * 5  # 320 seeds in batches of 64, two epochs
    for (a_in, a_out), (b_in, b_out) in zip(serial.batches, pipelined.batches, strict=True):
        assert torch.equal(a_in, b_in) and torch.equal(a_out, b_out)
    # Every seed once per epoch, in a new order each epoch.
    first = torch.cat([out for out, (e, _) in zip([b[1] for b in serial.batches], steps) if e == 0])
    second = torch.cat([out for out, (e, _) in zip([b[1] for b in serial.batches], steps) if e == 1])
    assert torch.equal(first.sort().values, nodes.sort().values) and not torch.equal(first, second)
    # Same minibatches and the same model seed: the same training, step for step.
    assert pipelined.losses == pytest.approx(serial.losses, rel=1e-4)


@pytest.mark.timeout(120)
def test_another_seed_draws_other_minibatches(runs, cora, nodes):
    serial, _, _ = runs
    other = run_loop(SerialLoader(cora, nodes, FANOUTS, BATCH, epochs=1, seed=4), cora, hidden=16,
                     keep_batches=True)
    assert not all(torch.equal(a[0], b[0]) for a, b in zip(serial.batches, other.batches))


def test_serial_timeline_runs_one_stage_at_a_time(runs):
    serial, _, _ = runs
    events = []
    for s in serial.timeline:
        assert s["wait"] is None
        events += [s["sample"], s["fetch"], s["compute"]]
    for (start, end), (next_start, _) in zip(events, events[1:]):
        assert start <= end <= next_start  # sample, fetch, compute, next step's sample, ...


def test_pipelined_timeline_overlaps_steps_within_the_queue_bound(runs):
    _, pipelined, tag = runs
    t = pipelined.timeline
    for s in t:  # within a step: data dependencies across the two processes (one clock)
        assert s["sample"][1] <= s["fetch"][0] and s["fetch"][1] <= s["wait"][1] <= s["compute"][0]
    for a, b in zip(t, t[1:]):  # one consumer: its computes run one after the other
        assert a["compute"][1] <= b["compute"][0]
    # The producer worked on a later step while the consumer computed an earlier one ...
    overlapping = [i for i in range(len(t) - 1) if t[i + 1]["sample"][0] < t[i]["compute"][1]]
    assert overlapping, "the producer never ran ahead of the consumer"
    # ... but never more than `depth` (2) minibatches fetched ahead: step i+2's
    # rows go into step i's slot, which comes back once step i's compute is done.
    for a, b in zip(t, t[2:]):
        assert b["fetch"][0] >= a["compute"][1]
    assert _left_behind(tag) == ([], [])


@pytest.mark.timeout(120)
def test_dying_producer_stops_the_loop_promptly_and_leaves_nothing(cora, nodes):
    loader = PrefetchingLoader(cora, nodes, FANOUTS, BATCH, epochs=50, depth=2, deadline_s=600)
    with pytest.raises(ProcessFailed) as failure:
        with loader:
            batches = iter(loader)
            next(batches)
            os.kill(loader.producer_pid, signal.SIGKILL)
            for _ in batches:
                pass
    message = str(failure.value)
    assert "sampler" in message and "SIGKILL" in message and "deadline" not in message  # its death, not a timeout
    assert _left_behind(loader.tag) == ([], [])
    assert not (loader.group.log_dir / "prefetch.sock").exists()
    assert (loader.group.log_dir / "sampler.log").exists()  # kept after a failure, for its log
    shutil.rmtree(loader.group.log_dir)


@pytest.mark.timeout(120)
def test_leaving_early_stops_the_producer(cora, nodes):
    with PrefetchingLoader(cora, nodes, FANOUTS, BATCH, epochs=50, depth=3) as loader:
        for minibatch in loader:
            if minibatch.step == 2:
                break
        tag, log_dir = loader.tag, loader.group.log_dir
    assert _left_behind(tag) == ([], [])
    assert not log_dir.exists()  # a run that ended well leaves no log folder either


def test_bad_input_names_the_problem(cora, nodes):
    with pytest.raises(ValueError, match="depth"):
        PrefetchingLoader(cora, nodes, FANOUTS, BATCH, depth=0)
    with pytest.raises(ValueError, match="fanouts must be positive"):
        PrefetchingLoader(cora, nodes, [5, 0], BATCH)
    with pytest.raises(ValueError, match="seed_nodes"):
        PrefetchingLoader(cora, torch.tensor([cora.num_nodes()]), FANOUTS, BATCH)
    with pytest.raises(RuntimeError, match="context manager"):
        iter(PrefetchingLoader(cora, nodes, FANOUTS, BATCH)).__next__()


@pytest.mark.timeout(240)
def test_compare_loops_alternates_epochs_of_the_same_minibatches(cora, nodes):
    runs = compare_loops(cora, nodes, FANOUTS, BATCH, hidden=8, epochs=2, dropout=0.0)
    assert len(runs["serial"]) == len(runs["pipelined"]) == 2
    for epoch, (serial, pipelined) in enumerate(zip(runs["serial"], runs["pipelined"])):
        assert [(s["epoch"], s["input_nodes"]) for s in serial.timeline] == \
            [(s["epoch"], s["input_nodes"]) for s in pipelined.timeline]
        assert {s["epoch"] for s in serial.timeline} == {epoch}
        # The producer starts an epoch when the consumer does: nothing of it was made before.
        assert pipelined.timeline[0]["sample"][0] >= 0
