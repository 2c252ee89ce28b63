"""Pipeline parallelism, GPipe style: the batch is cut into ``m`` micro-batches
that flow through ``p`` stages (one rank each); all forwards, then all
backwards; gradients accumulate over micro-batches, so one step equals a
full-batch step.  Each stage times its own compute (busy time); the pipeline's
wall time runs from the common start to the last stage's finish, and a stage's
bubble is the idle share ``1 - busy / wall``.  GPipe predicts a bubble of
``(p-1)/(m+p-1)`` when stages are balanced and communication is free.  The
CPU seconds of the compute are timed too: ``cpu_share`` (CPU / wall seconds
of compute) is ~1 when each stage had a core to itself and lower when other
processes took the cores -- then the machine, not the pipeline, sets the bubble.

Book: 3.3.3 pipeline parallelism.

Used in: chapters/03_distributed_ml.ipynb.

A hand-off is not free: before the steps, neighbouring stages time a ping-pong of
one micro-batch's activation (``handoff_s``, one way).  With it in every slot,
the schedule's wall time is ``(m+p-1)(busy/m + 2 handoff)`` (one hand-off in the
forward slot, one in the backward), which :func:`bubble_with_handoffs` turns into
a bubble; GPipe's formula is its limit for a free hand-off.

Example:
    >>> bubble_formula(2, 4)
    0.2
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from ..base.records import record
from ..comm.collectives import Comm
from .model_parallel import local_stage
from .toy import make_data


@record
@dataclass
class PipelineStage:
    """What one stage (rank) of :func:`run_pipeline` measured, and its weights after one step."""

    timings: dict[str, list[dict[str, float]]]  # per m (as a string), per repeat: start, end, busy, cpu, bytes
    params: list[torch.Tensor]  # this stage's layers after one SGD step (concatenate the stages' in order)
    sizes: list[int]  # the widths of the whole model's layers
    handoff_s: dict[str, float] = field(default_factory=dict)  # per m: one way of a micro-batch, to the next stage


def bubble_formula(stages: int, micro_batches: int) -> float:
    return (stages - 1) / (micro_batches + stages - 1)


def bubble_with_handoffs(stages: int, micro_batches: int, busy_s: float, handoff_s: float) -> float:
    """The bubble when every forward and backward slot also pays one hand-off of ``handoff_s``: a stage is busy
    ``busy_s`` (forward and backward of the whole batch) of a wall time ``(m+p-1)(busy_s/m + 2 handoff_s)``.

    Example:
        >>> round(bubble_with_handoffs(2, 4, busy_s=0.3, handoff_s=0.0), 3)    # GPipe's (p-1)/(m+p-1)
        0.2
        >>> round(bubble_with_handoffs(2, 16, busy_s=0.3, handoff_s=0.0009), 3), round(bubble_formula(2, 16), 3)
        (0.141, 0.059)
    """
    m = micro_batches
    return 1 - busy_s / ((m + stages - 1) * (busy_s / m + 2 * handoff_s))


def _handoff_s(rows: int, width: int, trips: int = 20) -> float:
    """The median one-way time of a ``rows x width`` activation between neighbouring stages (half a ping-pong's
    round trip, timed by the left stage of each pair; 0 on a stage that is no pair's left)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    comm, message, times = Comm(), torch.zeros(rows, width), []
    for left in range(world - 1):
        comm.barrier()
        if rank == left:
            for _ in range(trips):
                t0 = time.perf_counter()
                comm.send(message, left + 1)
                comm.recv(message, left + 1)
                times.append((time.perf_counter() - t0) / 2)
        elif rank == left + 1:
            for _ in range(trips):
                comm.recv(message, left)
                comm.send(message, left)
    comm.barrier()
    return statistics.median(times) if times else 0.0


def _one_step(stage: nn.Sequential, x: torch.Tensor, y: torch.Tensor, m: int, d_in: int, d_out: int,
              comm: Comm, emulated_s: float = 0.0) -> dict[str, float]:
    rank, world = dist.get_rank(), dist.get_world_size()
    first, last = rank == 0, rank == world - 1
    xs, ys = x.chunk(m), y.chunk(m)
    rows = [c.shape[0] for c in xs]
    busy = cpu = 0.0  # wall and CPU seconds spent computing
    inputs, outputs, sends = [], [], []
    comm.barrier()
    start = time.perf_counter()
    for i in range(m):  # forward: all micro-batches
        if first:
            inp = xs[i]
        else:
            inp = torch.empty(rows[i], d_in)
            comm.recv(inp, rank - 1)
            inp.requires_grad_(True)
        t0, c0 = time.perf_counter(), time.thread_time()
        out = stage(inp)
        if emulated_s:
            time.sleep(emulated_s * rows[i] / x.shape[0])
        if last:
            out = nn.functional.mse_loss(out, ys[i]) * (rows[i] / x.shape[0])  # the full-batch mean, piecewise
        busy += time.perf_counter() - t0
        cpu += time.thread_time() - c0
        if not last:
            sends.append(comm.isend(out.detach(), rank + 1))
        inputs.append(inp)
        outputs.append(out)
    for i in range(m):  # backward: all micro-batches
        if last:
            grad = None
        else:
            grad = torch.empty(rows[i], d_out)
            comm.recv(grad, rank + 1)
        t0, c0 = time.perf_counter(), time.thread_time()
        outputs[i].backward(grad)
        if emulated_s:
            time.sleep(2 * emulated_s * rows[i] / x.shape[0])  # backward ~ twice the forward
        busy += time.perf_counter() - t0
        cpu += time.thread_time() - c0
        if not first:
            sends.append(comm.isend(inputs[i].grad, rank - 1))
    end = time.perf_counter()
    for work in sends:
        work.wait()
    return {"start": start, "end": end, "busy": busy, "cpu": cpu}


def run_pipeline(width: int = 512, layers_per_stage: int = 4, batch: int = 512,
                 micro_batches: list[int] = (1, 4, 8), repeats: int = 3, lr: float = 0.01,
                 seed: int = 0, emulated_s: float = 0.0) -> PipelineStage:
    """Time one training step for each ``m`` in ``micro_batches`` (``repeats`` times
    each, after a warm-up); then take one SGD step with the last gradients of
    the last ``m``.  Returns a :class:`PipelineStage`: the timings and this stage's
    parameters (to compare with one process).

    ``emulated_s`` > 0 adds, per stage, that many seconds of sleep to the
    forward pass of the whole batch (twice as much to the backward), split
    over the micro-batches and counted as busy time: a stand-in for compute
    that needs no CPU, to check the *schedule* on a machine whose cores are
    taken by other programs.  The default 0 measures real matrix products only.

    ``perf_counter`` is the system-wide monotonic clock on Linux, so start and
    end times of different ranks can be compared by the caller.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    sizes = [width] * (layers_per_stage * world + 1)
    stage, d_in, d_out = local_stage(sizes, rank, world, seed)
    x, y = make_data(batch, width, width, seed)
    comm = Comm()
    timings: dict[str, list[dict[str, float]]] = {}
    handoffs: dict[str, float] = {}
    _one_step(stage, x, y, 2, d_in, d_out, comm)  # warm-up (allocator, first-call costs)
    for m in micro_batches:
        if batch % m:
            raise ValueError(f"batch {batch} does not split into {m} equal micro-batches")
        handoffs[str(m)] = _handoff_s(batch // m, width)
        runs = []
        for _ in range(repeats):
            stage.zero_grad()
            comm = Comm()
            timing = _one_step(stage, x, y, m, d_in, d_out, comm, emulated_s)
            comm.read()   # measured after the timed step (a quiet point of both stages)
            runs.append({**timing, "bytes_sent": comm.sent, "formula_sent": comm.formula[0]})
        timings[str(m)] = runs
    with torch.no_grad():
        for p in stage.parameters():
            p -= lr * p.grad
    return PipelineStage(timings=timings, params=[p.detach().clone() for p in stage.parameters()], sizes=sizes,
                         handoff_s=handoffs)


def bubble_fractions(per_rank: list[PipelineStage]) -> dict[int, dict[str, float]]:
    """From the ranks' results: per ``m`` the measured bubble (mean over stages,
    median over repeats), GPipe's formula, the stages' busy and wall seconds, the
    hand-off's one-way seconds (the slowest pair's) and the bubble it predicts
    (``with_handoffs``).

    Example:
        >>> fake = [PipelineStage(timings={"1": [{"start": 0.0, "end": 2.0, "busy": 1.0}]}, params=[], sizes=[])] * 2
        >>> bubble_fractions(fake)[1]["measured"]
        0.5
    """
    out = {}
    stages = len(per_rank)
    for key in per_rank[0].timings:
        bubbles, walls, busies, shares = [], [], [], []
        for rep in range(len(per_rank[0].timings[key])):
            runs = [r.timings[key][rep] for r in per_rank]
            wall = max(t["end"] for t in runs) - min(t["start"] for t in runs)
            bubbles.append(sum(1 - t["busy"] / wall for t in runs) / stages)
            walls.append(wall)
            busies.append(sum(t["busy"] for t in runs) / stages)
            shares.append(sum(t.get("cpu", t["busy"]) for t in runs) / max(sum(t["busy"] for t in runs), 1e-12))
        m, busy = int(key), statistics.median(busies)
        handoff = max(r.handoff_s.get(key, 0.0) for r in per_rank)
        out[m] = {"measured": statistics.median(bubbles), "formula": bubble_formula(stages, m),
                  "wall_s": statistics.median(walls), "busy_s": busy, "cpu_share": statistics.median(shares),
                  "handoff_s": handoff, "with_handoffs": bubble_with_handoffs(stages, m, busy, handoff)}
    return out
