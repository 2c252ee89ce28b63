"""Model parallelism: consecutive layers live on different ranks.  Rank r
receives the activation of rank r-1, runs its layers and sends its output on;
the last rank computes the loss; gradients travel back the same way.  Only one
rank computes at a time (no pipelining) -- that idle time is what
:mod:`gnnbook.ch3_parallel.pipeline` reduces.

Book: 3.3.2 model parallelism.

Used in: chapters/03_distributed_ml.ipynb.

Example:
    >>> from gnnbook.base.launch import run
    >>> out = run("gnnbook.ch3_parallel.model_parallel:train_model_parallel", 2,
    ...           {"sizes": [4, 8, 8, 2], "n": 16, "steps": 2})
    >>> from gnnbook.ch3_parallel.toy import train_single, max_abs_diff
    >>> max_abs_diff([p for r in out for p in r.params], train_single([4, 8, 8, 2], n=16, steps=2)["params"]) < 1e-5
    True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..base.records import record
from ..comm.collectives import Comm
from .toy import make_data, make_mlp


@record
@dataclass
class StageRank:
    """What one rank of :func:`train_model_parallel` ends with: its layers' weights and the bytes it moved."""

    params: list[torch.Tensor]  # this rank's layers only, in order (concatenate the ranks' for the whole model)
    comm: dict[str, Any]  # Comm.summary() of the activations and gradients it sent and received


def layer_owner(num_linear: int, world_size: int) -> list[int]:
    """Rank owning each linear layer: contiguous, as even as possible.

    Example:
        >>> layer_owner(5, 2)
        [0, 0, 0, 1, 1]
    """
    if num_linear < world_size:
        raise ValueError(f"{num_linear} layers cannot be split over {world_size} ranks; use more layers or fewer ranks")
    return [i * world_size // num_linear for i in range(num_linear)]


def local_stage(sizes: list[int], rank: int, world_size: int, seed: int = 0) -> tuple[nn.Sequential, int, int]:
    """This rank's layers (each linear with the tanh after it), and the widths of its input and output."""
    full = make_mlp(sizes, seed)
    owner = layer_owner(len(sizes) - 1, world_size)
    mine = [i for i, o in enumerate(owner) if o == rank]
    modules = list(full)  # Linear, Tanh, Linear, Tanh, ..., Linear
    start, stop = 2 * mine[0], min(2 * mine[-1] + 2, len(modules))
    return nn.Sequential(*modules[start:stop]), sizes[mine[0]], sizes[mine[-1] + 1]


def train_model_parallel(sizes: list[int], n: int = 256, steps: int = 20, lr: float = 0.1,
                         seed: int = 0) -> StageRank:
    """Full-batch SGD with the layers spread over the ranks; returns this rank's parameters
    and bytes as a :class:`StageRank`."""
    rank, world = dist.get_rank(), dist.get_world_size()
    stage, d_in, d_out = local_stage(sizes, rank, world, seed)
    x, y = make_data(n, sizes[0], sizes[-1], seed)
    opt = torch.optim.SGD(stage.parameters(), lr=lr)
    comm = Comm()
    for _ in range(steps):
        opt.zero_grad()
        if rank == 0:
            inp = x
        else:
            inp = torch.empty(n, d_in)
            comm.recv(inp, rank - 1)
            inp.requires_grad_(True)
        out = stage(inp)
        if rank == world - 1:
            nn.functional.mse_loss(out, y).backward()
        else:
            comm.send(out.detach(), rank + 1)
            grad_out = torch.empty(n, d_out)
            comm.recv(grad_out, rank + 1)
            out.backward(grad_out)
        if rank > 0:
            comm.send(inp.grad, rank - 1)
        opt.step()
    return StageRank(params=[p.detach().clone() for p in stage.parameters()], comm=comm.summary())
