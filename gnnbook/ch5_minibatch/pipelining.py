"""The training loop that the serial and the pipelined minibatch sources of
:mod:`gnnbook.ch5_minibatch.prefetch` feed, its per-step timeline, and the SALIENT
bound (book 5.2.1): serial epoch ~ sum(stages), pipelined epoch >= max(stage).

Book: 5.2.1 operator parallelism across minibatches (pipelining).

Used in: chapters/05a_minibatch_training_and_sampling.ipynb.

Example:
    >>> from gnnbook.data import load_dataset
    >>> from gnnbook.ch5_minibatch.prefetch import SerialLoader
    >>> g = load_dataset("cora")                                                          # doctest: +SKIP
    >>> run = run_loop(SerialLoader(g, torch.arange(256), [5, 5], 64), g, hidden=16)  # doctest: +SKIP
    >>> run.pipeline_bound()["speedup_bound"] > 1                                         # doctest: +SKIP
    True
"""
from __future__ import annotations

import contextlib
import gc
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

import dgl
import numpy as np
import torch

from ..base.cpu_share import CpuShare
from ..training.minibatch import minibatch_step
from ..models import build_model
from .prefetch import Minibatch, PrefetchingLoader, SerialLoader, kernels_on_one_thread, now


@dataclass
class LoopRun:
    """What one loop did: per-step stage intervals (seconds from the loop's
    start), per-epoch times, losses, and (optionally) the minibatches' node ids."""
    timeline: list[dict[str, Any]]
    epoch_seconds: list[float]
    losses: list[float]
    batches: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    # Cores other processes held while the loop ran (gnnbook.base.cpu_share); set by compare_loops.
    other_cores: float | None = None

    def stage_seconds(self) -> dict[str, float]:
        """Each stage's total time per epoch (mean over epochs)."""
        epochs = max(1, len(self.epoch_seconds))
        return {stage: sum(s[stage][1] - s[stage][0] for s in self.timeline if s.get(stage)) / epochs
                for stage in ("sample", "fetch", "wait", "compute")}

    def pipeline_bound(self) -> dict[str, float]:
        """The SALIENT argument for a two-stage pipeline (producer = sample + fetch,
        consumer = compute): serial ~ sum(stages), pipelined >= max(stage)."""
        s = self.stage_seconds()
        stages = {"sample+fetch": s["sample"] + s["fetch"], "compute": s["compute"]}
        total, slowest = sum(stages.values()), max(stages.values())
        return dict(**stages, sum_stages=total, max_stage=slowest, speedup_bound=total / slowest)

    def overlap(self) -> float:
        """The share of the shorter stage that ran while the other stage ran, from this run's own
        stage times and epochs: (sum(stages) - epoch) / min(stage).  1 means the epoch lasted its
        slowest stage (SALIENT's ideal), 0 or less that the stages ran one after the other.  Measured
        inside the same epochs, it does not depend on a second run under another load.  On stages of
        equal cost an overlap of 1/2 is an epoch of 3/4 of the serial one.

        Example:
            >>> run = LoopRun([dict(sample=(0.0, 0.1), fetch=(0.1, 0.2), wait=None, compute=(0.1, 0.5))],
            ...               [0.5], [1.0])
            >>> round(run.overlap(), 2)  # stages of 0.2 s and 0.4 s in a 0.5 s epoch: 0.1 of 0.2 s hidden
            0.5
        """
        s = self.stage_seconds()
        stages = (s["sample"] + s["fetch"], s["compute"])
        epoch = sum(self.epoch_seconds) / max(1, len(self.epoch_seconds))
        return (sum(stages) - epoch) / max(min(stages), 1e-9)


def run_loop(source: Iterable[Minibatch], graph: dgl.DGLGraph, hidden: int = 64, num_layers: int = 2,
             seed: int = 0, lr: float = 0.01, step: Callable[..., float] = minibatch_step,
             keep_batches: bool = False, **model_options: Any) -> LoopRun:
    """Train GraphSAGE (5.2.1's workload) on the minibatches of ``source`` with
    :func:`gnnbook.training.minibatch.minibatch_step` (or ``step``), torch and DGL on one
    thread, and record when each stage of each step ran.  ``model_options``
    go to :func:`gnnbook.models.build_model` (e.g. ``dropout=0.0``).

    More than 8 parameters: ``model_options`` pass through to :func:`gnnbook.models.build_model` unchanged.

    Example:
        >>> from gnnbook.data import load_dataset
        >>> g = load_dataset("cora")                                                          # doctest: +SKIP
        >>> run = run_loop(SerialLoader(g, torch.arange(256), [5, 5], 64), g, hidden=16)  # doctest: +SKIP
        >>> len(run.timeline)                                                                 # doctest: +SKIP
        4
    """
    feat, labels = graph.ndata["feat"], graph.ndata["label"]
    torch.manual_seed(seed)
    model = build_model("sage", feat.shape[1], int(labels.max()) + 1, hidden=hidden, num_layers=num_layers,
                        **model_options)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    timeline, losses, batches, epoch_ends = [], [], [], {}
    with kernels_on_one_thread(), _collector_paused():
        origin = now()
        for mb in source:
            start = now()
            # The rows are already fetched (mb.x, mb.y): the step takes all of them (slice(None)).
            losses.append(step(model, optimizer, mb.x, mb.y, slice(None), slice(None), mb.blocks))
            end = now()
            timeline.append(dict(epoch=mb.epoch, step=mb.step, input_nodes=len(mb.input_nodes),
                                 sample=_rel(mb.sample, origin), fetch=_rel(mb.fetch, origin),
                                 wait=_rel(mb.wait, origin), compute=(start - origin, end - origin)))
            epoch_ends[mb.epoch] = end - origin
            if keep_batches:
                batches.append((mb.input_nodes.clone(), mb.output_nodes.clone()))
    ends = [epoch_ends[e] for e in sorted(epoch_ends)]
    return LoopRun(timeline, [b - a for a, b in zip([0.0] + ends[:-1], ends)], losses, batches)


BALANCE_ROUNDS = 3  # balance_hidden's measurements: the fastest counts
PIPELINE_DEADLINE_S = 300.0  # compare_loops' producer process: seconds for all its epochs


def seed_passes(num_nodes: int, count: int, seed: int = 0) -> torch.Tensor:
    """``count`` seed nodes: shuffled passes over all ``num_nodes`` nodes, as many as it takes, so that an epoch
    of a small graph is long enough to time (Cora's 2,708 nodes make a 70 ms epoch at batch 512).

    Example:
        >>> seeds = seed_passes(5, 12)
        >>> len(seeds), sorted(seeds[:5].tolist())
        (12, [0, 1, 2, 3, 4])
    """
    shuffle = torch.Generator().manual_seed(seed)
    passes = -(-count // num_nodes)
    return torch.cat([torch.randperm(num_nodes, generator=shuffle) for _ in range(passes)])[:count]


def balance_hidden(graph: dgl.DGLGraph, seed_nodes: torch.Tensor, fanouts: Sequence[int], batch_size: int,
                   seed: int = 0, low: int = 4, high: int = 64, steps: int = 8,
                   **model_options: Any) -> dict[str, float]:
    """The hidden size at which a step's compute costs about what its sample +
    fetch cost (serial loop, one thread): compute grows about linearly with
    the hidden size, so it is measured at ``low`` and ``high`` on ``steps``
    minibatches (after one warm-up step), in :data:`BALANCE_ROUNDS` rounds of
    which the fastest counts, and the line is solved, within [low, high].

    More than 8 parameters: ``model_options`` pass through to :func:`gnnbook.models.build_model` unchanged.

    Example:
        >>> from gnnbook.data import load_dataset
        >>> g = load_dataset("cora")                                                      # doctest: +SKIP
        >>> 4 <= balance_hidden(g, torch.arange(640), [10, 10], 64, dropout=0.0)["hidden"] <= 64  # doctest: +SKIP
        True
    """
    nodes = torch.as_tensor(seed_nodes)[: (steps + 1) * batch_size]

    def measure() -> tuple[float, dict[int, float]]:
        producer, compute = [], {}
        for hidden in (low, high):
            run = run_loop(SerialLoader(graph, nodes, fanouts, batch_size, seed=seed), graph, hidden=hidden,
                           num_layers=len(fanouts), seed=seed, **model_options)
            steps_run = run.timeline[1:] or run.timeline
            producer += [s["sample"][1] - s["sample"][0] + s["fetch"][1] - s["fetch"][0] for s in steps_run]
            compute[hidden] = float(np.mean([s["compute"][1] - s["compute"][0] for s in steps_run]))
        return float(np.mean(producer)), compute

    # The least disturbed of BALANCE_ROUNDS rounds (the fastest sample + fetch), as benchmarks keep their fastest
    # repeat: in a notebook kernel, right after chapter 5.1's DistDGL jobs, a round sometimes ran sample + fetch 3x
    # slower (15 vs 5 ms per step on Cora, no other process busy) and picked a hidden size that left nothing to overlap.
    target, compute = min((measure() for _ in range(BALANCE_ROUNDS)), key=lambda m: m[0])
    slope = (compute[high] - compute[low]) / (high - low)
    hidden = high if slope <= 0 else low + (target - compute[low]) / slope
    return dict(hidden=int(round(min(high, max(low, hidden)))), sample_fetch_s=target,
                compute_low_s=compute[low], compute_high_s=compute[high])


def compare_loops(graph: dgl.DGLGraph, seed_nodes: torch.Tensor, fanouts: Sequence[int], batch_size: int,
                  hidden: int, epochs: int = 3, seed: int = 0, depth: int = 2, **model_options: Any) -> dict[str, list]:
    """Serial and pipelined epochs of the same minibatches, alternating (a
    serial epoch, then the pipelined one), so that a machine whose load drifts
    slows both alike.  Returns ``{"serial": [LoopRun per epoch], "pipelined": [...]}``;
    each run's ``other_cores`` says how many cores other processes than the
    trainer and the producer held meanwhile (the pipeline needs two free ones).
    The producer runs under :data:`PIPELINE_DEADLINE_S`.

    More than 8 parameters: ``model_options`` pass through to :func:`gnnbook.models.build_model` unchanged.

    Example:
        >>> from gnnbook.data import load_dataset
        >>> g = load_dataset("cora")                                                       # doctest: +SKIP
        >>> runs = compare_loops(g, torch.arange(640), [10, 10], 64, hidden=8, epochs=2)    # doctest: +SKIP
        >>> len(runs["serial"]), len(runs["pipelined"])                                    # doctest: +SKIP
        (2, 2)
    """
    serial = SerialLoader(graph, seed_nodes, fanouts, batch_size, epochs=epochs, seed=seed)
    runs: dict[str, list] = {"serial": [], "pipelined": []}
    options = dict(hidden=hidden, num_layers=len(fanouts), seed=seed, **model_options)
    with PrefetchingLoader(graph, seed_nodes, fanouts, batch_size, epochs=epochs, seed=seed, depth=depth,
                           deadline_s=PIPELINE_DEADLINE_S) as pipelined:
        ours = [os.getpid(), pipelined.producer_pid]
        for _ in range(epochs):
            for name, loader in (("serial", serial), ("pipelined", pipelined)):
                with CpuShare(ours) as share:
                    run = run_loop(loader.epoch(), graph, **options)

                run.other_cores = share.other_cores
                runs[name].append(run)
    return runs



@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while a loop is timed (as :mod:`timeit` does): in a notebook's kernel a full
    collection walks every object of the session and would land in one loop's epoch, serial or pipelined."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _rel(interval: tuple[float, float] | None, origin: float) -> tuple[float, float] | None:
    return None if interval is None else (interval[0] - origin, interval[1] - origin)
