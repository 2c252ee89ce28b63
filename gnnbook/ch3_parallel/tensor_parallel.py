"""Tensor parallelism (Megatron-LM's MLP split): ``y = gelu(x A + a) B + b``
with ``A`` split by columns and ``B`` by rows over the ranks.  Rank i computes
``gelu(x A_i + a_i) B_i`` -- no communication, because gelu acts elementwise
on its own columns -- and one all-reduce sums the partial outputs.  In the
backward pass each rank's weight gradients are local; the input gradient is
a sum over ranks (the second all-reduce).

Book: 3.3.4 tensor parallelism.

Used in: chapters/03_distributed_ml.ipynb.

Example:
    >>> from gnnbook.base.launch import run
    >>> out = run("gnnbook.ch3_parallel.tensor_parallel:mlp_tensor_parallel", 2, {"d": 8, "hidden": 16, "n": 4})
    >>> ref = mlp_single(d=8, hidden=16, n=4)
    >>> bool(torch.allclose(out[0].y, ref["y"], atol=1e-5))
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


@record
@dataclass
class TensorParallelRank:
    """What one rank of :func:`mlp_tensor_parallel` computed: the whole output, its gradient blocks, its bytes."""

    y: torch.Tensor  # the full output (the same on every rank)
    loss: torch.Tensor
    grad_A: torch.Tensor  # this rank's column block of A's gradient
    grad_a: torch.Tensor  # ... and of a's
    grad_B: torch.Tensor  # this rank's row block of B's gradient
    grad_b: torch.Tensor
    grad_x: torch.Tensor  # the full input gradient (after the second all-reduce)
    comm: dict[str, Any]  # Comm.summary() of the two all-reduces


def _problem(d: int, hidden: int, n: int, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {"A": torch.randn(d, hidden, generator=gen) / d ** 0.5, "a": 0.1 * torch.randn(hidden, generator=gen),
            "B": torch.randn(hidden, d, generator=gen) / hidden ** 0.5, "b": 0.1 * torch.randn(d, generator=gen),
            "x": torch.randn(n, d, generator=gen), "target": torch.randn(n, d, generator=gen)}


def mlp_single(d: int = 64, hidden: int = 240, n: int = 32, seed: int = 0) -> dict[str, torch.Tensor]:
    """One process: output, loss and gradients of the unsplit layer."""
    p = {k: v.clone().requires_grad_(k not in ("target",)) for k, v in _problem(d, hidden, n, seed).items()}
    y = nn.functional.gelu(p["x"] @ p["A"] + p["a"]) @ p["B"] + p["b"]
    loss = nn.functional.mse_loss(y, p["target"])
    loss.backward()
    return {"y": y.detach(), "loss": loss.detach(), **{f"grad_{k}": p[k].grad for k in ("A", "a", "B", "b", "x")}}


def mlp_tensor_parallel(d: int = 64, hidden: int = 240, n: int = 32, seed: int = 0) -> TensorParallelRank:
    """This rank's share, a :class:`TensorParallelRank`: the full output ``y`` (same on every rank),
    the loss, the gradients of its column block of ``A``/``a`` and row block of ``B``,
    the full input gradient, and the bytes communicated."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if hidden % world:
        raise ValueError(f"hidden={hidden} must be divisible by world_size={world}")
    full = _problem(d, hidden, n, seed)
    cols = slice(rank * hidden // world, (rank + 1) * hidden // world)
    A = full["A"][:, cols].clone().requires_grad_(True)
    a = full["a"][cols].clone().requires_grad_(True)
    B = full["B"][cols, :].clone().requires_grad_(True)
    x = full["x"].clone().requires_grad_(True)
    comm = Comm()
    partial = nn.functional.gelu(x @ A + a) @ B          # local, no communication
    y = partial.detach().clone()
    comm.all_reduce(y)                                   # forward all-reduce ("g" in Megatron)
    y = (y + full["b"]).requires_grad_(True)              # the bias is added once, after the sum
    loss = nn.functional.mse_loss(y, full["target"])
    loss.backward()                                       # dL/dy, identical on every rank
    partial.backward(y.grad)                              # local weight gradients, a partial dL/dx
    grad_x = x.grad.clone()
    comm.all_reduce(grad_x)                               # backward all-reduce ("f" in Megatron)
    return TensorParallelRank(y=y.detach(), loss=loss.detach(), grad_A=A.grad, grad_a=a.grad, grad_B=B.grad,
                              grad_b=y.grad.sum(0), grad_x=grad_x, comm=comm.summary())
