"""Data parallelism two ways: gradient all-reduce (DistributedDataParallel)
and a parameter server (rank 0 holds the weights; workers push gradients and
pull weights).  Each rank trains on its block of the same full batch, so after
every step the weights equal one process's full-batch step (within float
rounding): the mean of equal-sized shard means is the full-batch mean.

Book: 3.3.1 data parallelism; 3.4.1 distributed training architectures.

Used in: chapters/03_distributed_ml.ipynb.

Run them with :func:`gnnbook.base.launch.run`:

Example:
    >>> from gnnbook.base.launch import run
    >>> out = run("gnnbook.ch3_parallel.data_parallel:train_allreduce", 2, {"sizes": [4, 8, 2], "n": 16, "steps": 2})
    >>> from gnnbook.ch3_parallel.toy import train_single, max_abs_diff
    >>> max_abs_diff(out[0].params, train_single([4, 8, 2], n=16, steps=2)["params"]) < 1e-5
    True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..base.records import record
from ..comm.collectives import Comm
from .toy import make_data, make_mlp, shard


@record
@dataclass
class AllReduceRank:
    """What one rank of :func:`train_allreduce` ends with: its replica's weights and the bytes it moved."""

    params: list[torch.Tensor]  # the final weights, layer by layer (every rank holds the same)
    comm: dict[str, Any]  # Comm.summary() of the gradient all-reduces of steps 2..
    measured_steps: int  # how many steps ``comm`` covers
    param_bytes: int  # float32 bytes of one replica


@record
@dataclass
class ParameterServerRank:
    """What one rank of :func:`train_parameter_server` (rank 0 the server, the others workers) ends with."""

    params: list[torch.Tensor]  # the final weights, layer by layer
    comm: dict[str, Any]  # Comm.summary() of every push and pull
    param_bytes: int  # float32 bytes of the flat weight vector


def _counted_allreduce_hook(state, bucket):  # no annotations: DDP checks them and they are strings here
    """DDP's gradient all-reduce, through the byte counter ``state["comm"]``: average one bucket."""
    comm = state["comm"]
    buffer = bucket.buffer().div_(comm.world_size)
    work = comm.all_reduce(buffer, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def train_allreduce(sizes: list[int], n: int = 256, steps: int = 20, lr: float = 0.1,
                    seed: int = 0) -> AllReduceRank:
    """DDP: every rank keeps a full replica, gradients are all-reduced each step.  Returns an
    :class:`AllReduceRank`, whose ``comm`` covers steps 2.. (``measured_steps`` of them)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = make_data(n, sizes[0], sizes[-1], seed)
    x, y = shard(x, rank, world), shard(y, rank, world)
    model = DistributedDataParallel(make_mlp(sizes, seed))
    hook_state = {"comm": Comm(measure=False)}
    model.register_comm_hook(hook_state, _counted_allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(steps):
        if step == min(2, steps - 1):
            # DDP talks by itself in its first steps (it broadcasts the initial weights and, in the
            # forward of step 1, the bucket order it learnt in step 0): measure from step 2 on,
            # where the gradient all-reduce is all that crosses the wire.
            hook_state["comm"] = Comm()
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    params = [p.detach().clone() for p in model.module.parameters()]
    return AllReduceRank(params=params, comm=hook_state["comm"].summary(), measured_steps=steps - min(2, steps - 1),
                         param_bytes=sum(p.numel() * 4 for p in params))


def train_parameter_server(sizes: list[int], n: int = 256, steps: int = 20, lr: float = 0.1,
                           seed: int = 0) -> ParameterServerRank:
    """Rank 0 is the server; ranks 1..N-1 are workers, each with 1/(N-1) of the batch.
    Per step: every worker pushes its flat gradient, the server averages them,
    takes the SGD step and sends the new flat weights back.  Returns a :class:`ParameterServerRank`."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if world < 2:
        raise ValueError("a parameter server needs world_size >= 2 (one server, at least one worker)")
    workers = world - 1
    model = make_mlp(sizes, seed)
    flat = nn.utils.parameters_to_vector(model.parameters()).detach()
    comm = Comm()
    if rank == 0:
        grad_in, total = torch.empty_like(flat), torch.empty_like(flat)
        for _ in range(steps):
            total.zero_()
            for worker in range(1, world):
                comm.recv(grad_in, worker)
                total += grad_in
            flat -= lr * total / workers
            for worker in range(1, world):
                comm.send(flat, worker)
        nn.utils.vector_to_parameters(flat, model.parameters())
    else:
        x, y = make_data(n, sizes[0], sizes[-1], seed)
        x, y = shard(x, rank - 1, workers), shard(y, rank - 1, workers)
        for _ in range(steps):
            model.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            comm.send(torch.cat([p.grad.reshape(-1) for p in model.parameters()]), 0)
            comm.recv(flat, 0)
            with torch.no_grad():
                nn.utils.vector_to_parameters(flat, model.parameters())
    params = [p.detach().clone() for p in model.parameters()]
    return ParameterServerRank(params=params, comm=comm.summary(), param_bytes=flat.numel() * 4)
