"""BSP, ASP and SSP on a parameter server, with a straggler.

Book: 3.4.2 model update strategies (BSP, ASP, SSP).

Used in: chapters/03_distributed_ml.ipynb.

Rank 0 is the server, ranks 1..W the workers.  A worker repeatedly computes a
mini-batch gradient of a least-squares problem on its shard with the weights
it last pulled, pushes it (tagged with its clock, the number of gradients it
has pushed), and waits for fresh weights.  The server applies every gradient
as it arrives (``w -= lr/W * g``) and answers a worker only when that worker
is at most ``s`` clocks ahead of the slowest one:

- ``s = 0``: bulk synchronous (BSP) -- everyone waits for the straggler each round;
- ``0 < s < inf``: stale synchronous (SSP, bounded staleness);
- ``s = None`` (unbounded): asynchronous (ASP).

Stragglers are injected by sleeping ``straggler_s`` before a push, in one of two ways:

- ``straggler="persistent"``: worker 1 sleeps before every push (a slow machine);
- ``straggler="transient"``: before each push, each worker sleeps with
  probability ``straggler_prob`` (seeded; a busy or preempted machine, the
  case SSP was designed for: the slowest worker changes from round to round).

The gradient of this small problem takes microseconds, far less than a
message; each worker therefore pads its compute to ``compute_s`` seconds by
sleeping, standing for a model whose gradient takes longer than sending it
(and, because sleeping needs no CPU, keeping the timing stable on a busy
machine).  A bound of ``s`` lets a worker run ahead through about
``s * compute_s`` seconds of another worker's delay.

With a persistent straggler bounded staleness only buys the first ``s``
rounds: the fast workers then wait at the bound and everyone moves at the
straggler's pace, as under BSP.  With transient ones BSP pays for the slowest
worker of every round, SSP roughly for the average one.  The
server evaluates the full-data loss after each update and stops everyone when
it reaches ``target_loss``; it reports the time and the number of updates
that took.  Timings depend on the machine; the comparison between s values
is what matters.

Example:
    >>> from gnnbook.base.launch import run
    >>> out = run("gnnbook.ch3_parallel.sync:train_ssp", 3, {"staleness": 1, "straggler_s": 0.0, "target_loss": 0.5})
    >>> out[0].reached
    True
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from ..base.records import record
from ..comm.collectives import Comm


@record
@dataclass
class SSPServer:
    """What :func:`train_ssp`'s rank 0, the parameter server, measured."""

    staleness: int  # the bound s; -1 for unbounded (ASP)
    reached: bool  # whether the loss reached target_loss
    time_to_target_s: float | None  # seconds until it did (None: it did not)
    updates: int  # gradients applied
    curve: torch.Tensor  # (seconds, full-data loss) after each update, row 0 the start
    clocks: list[int]  # pushes per worker (ranks 1..W)
    comm: dict[str, Any]  # Comm.summary() of the server's messages


@record
@dataclass
class SSPWorker:
    """What one of :func:`train_ssp`'s workers (ranks 1..W) measured."""

    pushes: int  # gradients it pushed
    waited_s: float  # seconds it waited for the server's answers
    slept: int  # pushes it was the injected straggler for
    comm: dict[str, Any]  # Comm.summary() of its messages


def make_problem(n: int, d: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen)
    w_true = torch.randn(d, generator=gen)
    return x, x @ w_true + 0.1 * torch.randn(n, generator=gen)


def loss_of(w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> float:
    return float(((x @ w - y) ** 2).mean() / 2)


def train_ssp(staleness: int | None = 0, straggler_s: float = 0.03, straggler: str = "transient",
              straggler_prob: float = 0.25, compute_s: float = 0.01, target_loss: float = 0.05,
              n: int = 4096, d: int = 64, batch: int = 64, lr: float = 0.1, max_updates: int = 5000,
              seed: int = 0) -> SSPServer | SSPWorker:
    """One run; the server (rank 0) returns an :class:`SSPServer` (the loss curve and time to target),
    each worker an :class:`SSPWorker` (its number of pushes and the time it spent waiting for the server).

    More than 8 parameters: a rank's entry point for gnnbook.base.launch.run, whose arguments arrive in each
    process as JSON: each knob is its own argument (no settings objects across processes).
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    if world < 2:
        raise ValueError("needs world_size >= 2: a server and at least one worker")
    if straggler not in ("transient", "persistent"):
        raise ValueError(f"straggler must be 'transient' or 'persistent', got {straggler!r}")
    workers = world - 1
    x, y = make_problem(n, d, seed)
    comm = Comm()
    push = torch.empty(d + 1)           # [clock, gradient]
    reply = torch.zeros(d + 1)          # [stop flag, weights]
    if rank == 0:
        return _serve(comm, x, y, workers, staleness, target_loss, lr, max_updates, push, reply)
    rows = slice((rank - 1) * n // workers, rank * n // workers)
    xs, ys = x[rows], y[rows]
    gen = torch.Generator().manual_seed(seed * 100 + rank)
    w = torch.zeros(d)
    clock, waited, slept = 0, 0.0, 0
    while True:
        t_compute = time.perf_counter()
        pick = torch.randint(0, xs.shape[0], (batch,), generator=gen)
        xb, yb = xs[pick], ys[pick]
        grad = xb.T @ (xb @ w - yb) / batch
        pad = compute_s - (time.perf_counter() - t_compute)
        if pad > 0:
            time.sleep(pad)                # stands for the compute of a larger model (see the module doc)
        slow = (rank == 1) if straggler == "persistent" else bool(torch.rand((), generator=gen) < straggler_prob)
        if slow and straggler_s > 0:
            time.sleep(straggler_s)        # the injected straggler
            slept += 1
        push[0], push[1:] = clock, grad
        comm.send(push, 0)
        clock += 1
        t0 = time.perf_counter()
        comm.recv(reply, 0)
        waited += time.perf_counter() - t0
        if reply[0] > 0:
            return SSPWorker(pushes=clock, waited_s=waited, slept=slept, comm=comm.summary())
        w = reply[1:].clone()


def _serve(comm: Comm, x, y, workers: int, staleness: int | None, target_loss: float, lr: float,
           max_updates: int, push: torch.Tensor, reply: torch.Tensor) -> SSPServer:
    d = x.shape[1]
    w = torch.zeros(d)
    clocks = [0] * (workers + 1)         # index = worker rank; [0] unused
    waiting: set[int] = set()
    stopped: set[int] = set()
    stopping = False
    curve: list[tuple[float, float]] = [(0.0, loss_of(w, x, y))]
    reached_at = None
    start = time.perf_counter()

    def answer(worker: int) -> None:
        reply[0] = 1.0 if stopping else 0.0
        reply[1:] = w
        comm.send(reply, worker)
        if stopping:
            stopped.add(worker)

    while len(stopped) < workers:
        src = comm.recv(push)           # from whichever worker pushes next
        clocks[src] = int(push[0]) + 1
        if not stopping:
            w -= lr / workers * push[1:]
            loss = loss_of(w, x, y)
            curve.append((time.perf_counter() - start, loss))
            if loss <= target_loss or len(curve) > max_updates:
                stopping = True
                reached_at = curve[-1][0] if loss <= target_loss else None
        waiting.add(src)
        slowest = min(clocks[1:])
        for worker in sorted(waiting):
            if stopping or staleness is None or clocks[worker] - slowest <= staleness:
                waiting.discard(worker)
                answer(worker)
    return SSPServer(staleness=-1 if staleness is None else staleness, reached=reached_at is not None,
                     time_to_target_s=reached_at, updates=len(curve) - 1, curve=torch.tensor(curve),
                     clocks=clocks[1:], comm=comm.summary())
