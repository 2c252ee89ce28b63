"""The deadlocks of collective communication (book 5.5.2), reproduced on real processes.

Book: 5.5.2 the deadlock of collective communication.

Used in: chapters/05d_communication.ipynb.

A collective completes only when every rank of the group calls it, with the
same tensor shapes, in the same order.  Three ways a data-parallel job breaks
that rule, each run here in real gloo processes:

* **uneven inputs**: rank 0 has more minibatches than rank 1.  After rank 1's
  last step, rank 0's next ``backward`` waits in DistributedDataParallel's
  gradient all-reduce for a peer that has left the loop: the job hangs until
  its deadline.  Two fixes: ``torch.distributed.algorithms.Join`` (a rank that
  has run out of inputs keeps answering the others' all-reduces with zero
  gradients, so the gradient sum is divided by the full world size), or
  truncating every rank to the smallest number of steps (what
  :mod:`gnnbook.distributed.trainer` does);
* **mismatched order**: ranks call the same collectives in a different order.
  gloo aborts the process on a size mismatch; ``TORCH_DISTRIBUTED_DEBUG=DETAIL``
  checks every collective's fingerprint first and raises an error naming both ranks' calls;
* **a missing call**: one rank makes a collective the others never make.  It
  waits for ever unless its process group has a timeout; with one, gloo raises
  a timeout error.

:func:`train_uneven` and :func:`mismatched_order` / :func:`missing_collective`
run inside the ranks (:func:`gnnbook.base.launch.run`); :func:`replay_uneven` is
the single-process arithmetic that a finished run must equal exactly.

Example:
    >>> from gnnbook.base.launch import run
    >>> out = run("gnnbook.comm.uneven:train_uneven", 2, {"steps": [3, 2], "mode": "join"})
    >>> [r.steps_run for r in out]
    [3, 2]
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.distributed as dist

from ..base.records import record

MODES = ("plain", "join", "truncate")
DIM = 4


@record
@dataclass
class UnevenRank:
    """What one rank of :func:`train_uneven` ends with: the steps it ran and the final weights."""

    steps_run: int  # minibatches this rank trained on
    weight: torch.Tensor  # the model's final weight (the same on every rank)
    bias: torch.Tensor


@record
@dataclass
class MissingCall:
    """What one rank of :func:`missing_collective` saw: the error it got (if any) and how long it waited."""

    error: str | None  # the first line of the error (rank 0: the group's timeout), None if none
    waited_s: float


def minibatch(rank: int, step: int, batch: int = 8, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s minibatch number ``step``: seeded, so one process can replay every rank's data."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + rank * 1009 + step)
    x = torch.randn(batch, DIM, generator=gen)
    return x, x.sum(1, keepdim=True) + 0.1 * torch.randn(batch, 1, generator=gen)


def _model(seed: int) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(DIM, 1)


def _check(steps: Sequence[int], mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    if not steps or min(steps) < 1:
        raise ValueError(f"steps must give every rank at least one minibatch, got {list(steps)}")


def train_uneven(steps: Sequence[int], mode: str = "plain", lr: float = 0.05, seed: int = 0) -> UnevenRank:
    """Run in each rank: DDP training where rank ``r`` has ``steps[r]`` minibatches.

    ``plain`` hangs when the counts differ; ``join`` wraps the loop in
    ``Join([model])``; ``truncate`` runs ``min(steps)`` on every rank.
    Returns an :class:`UnevenRank`: the final weights and the steps this rank ran.
    """
    from torch.distributed.algorithms.join import Join
    from torch.nn.parallel import DistributedDataParallel

    _check(steps, mode)
    rank = dist.get_rank()
    if len(steps) != dist.get_world_size():
        raise ValueError(f"steps has {len(steps)} entries for {dist.get_world_size()} ranks")
    model = DistributedDataParallel(_model(seed))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    mine = min(steps) if mode == "truncate" else steps[rank]

    def loop() -> None:
        for step in range(mine):
            x, y = minibatch(rank, step, seed=seed)
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()  # the all-reduce happens in here
            optimizer.step()

    if mode == "join":
        with Join([model]):
            loop()
    else:
        loop()
    return UnevenRank(steps_run=mine, weight=model.module.weight.detach().clone(),
                      bias=model.module.bias.detach().clone())


def replay_uneven(steps: Sequence[int], mode: str, lr: float = 0.05, seed: int = 0) -> dict[str, torch.Tensor]:
    """What a finished :func:`train_uneven` run must end with, computed in one process:
    at every step, the sum of the gradients of the ranks that still have data,
    divided by the world size (``join``: a rank that has joined contributes zero;
    ``truncate``: every rank stops after ``min(steps)``).

    Example:
        >>> sorted(replay_uneven([2, 2], "truncate"))
        ['bias', 'weight']
    """
    _check(steps, mode)
    if mode == "plain" and len(set(steps)) > 1:
        raise ValueError("plain DDP with uneven steps does not finish: there is nothing to replay")
    model = _model(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    counts = [min(steps)] * len(steps) if mode == "truncate" else list(steps)
    for step in range(max(counts)):
        grads = [torch.zeros_like(p) for p in model.parameters()]
        for rank, count in enumerate(counts):
            if step < count:
                x, y = minibatch(rank, step, seed=seed)
                model.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                grads = [g + p.grad for g, p in zip(grads, model.parameters())]
        for p, g in zip(model.parameters(), grads):
            p.grad = g / len(counts)
        optimizer.step()
    return dict(weight=model.weight.detach(), bias=model.bias.detach())


def mismatched_order() -> dict[str, Any]:
    """Run in each rank: rank 0 all-reduces a 10-element then a 1000-element
    tensor, the others the other way round (it never returns normally)."""
    small, large = torch.ones(10), torch.ones(1000)
    for t in ((small, large) if dist.get_rank() == 0 else (large, small)):
        dist.all_reduce(t)
    return dict(finished=True)


def missing_collective(timeout_s: float = 3.0) -> MissingCall:
    """Run in each rank: rank 0 makes one all-reduce more than the others, on a
    group whose timeout is ``timeout_s``.  Returns a :class:`MissingCall`: the error
    rank 0 got (if any) and how long it waited."""
    import time

    group = dist.new_group(timeout=datetime.timedelta(seconds=timeout_s))
    dist.all_reduce(torch.ones(4), group=group)  # every rank: fine
    if dist.get_rank() != 0:
        return MissingCall(error=None, waited_s=0.0)
    start = time.perf_counter()
    try:
        dist.all_reduce(torch.ones(4), group=group)  # nobody else calls this one
    except RuntimeError as err:
        return MissingCall(error=str(err).splitlines()[0][:300], waited_s=time.perf_counter() - start)
    return MissingCall(error=None, waited_s=time.perf_counter() - start)
