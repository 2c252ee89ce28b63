"""Fully sharded data parallelism (the ZeRO-3 / FSDP idea), small and explicit.

Book: 3.3.6 fully sharded data parallelism.

Used in: chapters/03_distributed_ml.ipynb.

Each layer's weights and bias are flattened into one vector, padded to a
multiple of N, and every rank keeps only its 1/N slice -- and only the
gradient and Adam state (``exp_avg``, ``exp_avg_sq``) of that slice.  A
training step, per rank, on its block of the batch:

1. forward, layer by layer: ``all_gather_into_tensor`` the layer's full
   vector, compute, drop it (only the activation is kept);
2. backward, layers in reverse: gather the layer again, recompute its output
   from the saved input, backpropagate, and ``reduce_scatter_tensor`` the
   layer's gradient so each rank receives the averaged gradient of its slice;
3. Adam on the slice (Adam works elementwise, so sharded Adam = full Adam).

Memory is counted from tensor sizes (``numel * element_size``) of what a rank
holds between steps: parameters, gradients and optimizer state.

Example:
    >>> from gnnbook.base.launch import run
    >>> from gnnbook.ch3_parallel.toy import train_single, max_abs_diff
    >>> out = run("gnnbook.ch3_parallel.sharded:train_sharded", 2, {"sizes": [4, 8, 2], "n": 16, "steps": 2})
    >>> max_abs_diff(out[0].params, train_single([4, 8, 2], n=16, steps=2, lr=0.01, optimizer="adam")["params"]) < 1e-5
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
from .toy import make_data, make_mlp, make_optimizer, shard


@record
@dataclass
class ShardedRank:
    """What one rank of :func:`train_sharded` ends with: the gathered model, what it held, what it moved."""

    params: list[torch.Tensor]  # the whole model, gathered once more at the end (for the comparison)
    held_bytes: dict[str, int]  # between steps: params, grads, optimizer (its slices only)
    peak_gathered_bytes: int  # the largest transient gathered layer (+ its gradient)
    comm: dict[str, Any]  # Comm.summary() of the gathers and reduce-scatters
    param_count: int  # parameters of the whole model (unpadded)


def tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def training_state_bytes(params: list[torch.Tensor], opt: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes of parameters, gradients and optimizer state (every tensor in ``opt.state``)."""
    state = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
    grads = [p.grad for p in params if p.grad is not None]
    return {"params": tensor_bytes(params), "grads": tensor_bytes(grads), "optimizer": tensor_bytes(state)}


def unsharded_state_bytes(sizes: list[int], n: int = 256, lr: float = 0.01, seed: int = 0) -> dict[str, int]:
    """The same count for one process training the whole model with Adam (one step, so the state exists)."""
    x, y = make_data(n, sizes[0], sizes[-1], seed)
    model = make_mlp(sizes, seed)
    opt = make_optimizer("adam", model.parameters(), lr)
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    return training_state_bytes(list(model.parameters()), opt)


def _layer_forward(flat: torch.Tensor, inp: torch.Tensor, d_in: int, d_out: int, last: bool) -> torch.Tensor:
    weight = flat[: d_out * d_in].view(d_out, d_in)
    bias = flat[d_out * d_in: d_out * d_in + d_out]
    out = inp @ weight.T + bias
    return out if last else torch.tanh(out)


def train_sharded(sizes: list[int], n: int = 256, steps: int = 20, lr: float = 0.01, seed: int = 0) -> ShardedRank:
    """Adam, fully sharded; returns a :class:`ShardedRank`: the gathered final parameters (for the
    comparison), the bytes held per rank, the peak of gathered (transient) bytes,
    and the bytes communicated."""
    rank, world = dist.get_rank(), dist.get_world_size()
    comm = Comm()
    full_model = make_mlp(sizes, seed)
    linears = [m for m in full_model if isinstance(m, nn.Linear)]
    numels = [lin.weight.numel() + lin.bias.numel() for lin in linears]
    padded = [-(-k // world) * world for k in numels]
    shards = []
    for lin, k, kp in zip(linears, numels, padded):
        flat = torch.cat([lin.weight.detach().reshape(-1), lin.bias.detach(), torch.zeros(kp - k)])
        shards.append(nn.Parameter(flat[rank * kp // world:(rank + 1) * kp // world].clone()))
    del full_model, linears  # from here on a rank holds only its slices
    opt = make_optimizer("adam", shards, lr)
    x, y = make_data(n, sizes[0], sizes[-1], seed)
    x, y = shard(x, rank, world), shard(y, rank, world)
    dims = list(zip(sizes[:-1], sizes[1:]))
    last = len(dims) - 1
    peak_gathered = 0

    def gather(i: int) -> torch.Tensor:
        full = torch.empty(padded[i])
        comm.all_gather_into_tensor(full, shards[i].detach())
        return full

    for _ in range(steps):
        acts = [x]
        with torch.no_grad():
            for i, (d_in, d_out) in enumerate(dims):
                full = gather(i)
                peak_gathered = max(peak_gathered, tensor_bytes([full]))
                acts.append(_layer_forward(full, acts[-1], d_in, d_out, i == last))
                del full
        out = acts[-1].requires_grad_(True)
        nn.functional.mse_loss(out, y).backward()
        grad = out.grad
        for i in reversed(range(len(dims))):
            full = gather(i).requires_grad_(True)
            inp = acts[i].detach().requires_grad_(i > 0)
            _layer_forward(full, inp, *dims[i], i == last).backward(grad)
            peak_gathered = max(peak_gathered, tensor_bytes([full, full.grad]))
            grad_shard = torch.empty_like(shards[i])
            comm.reduce_scatter_tensor(grad_shard, full.grad / world)
            shards[i].grad = grad_shard
            grad = inp.grad
            del full
        opt.step()
    held = training_state_bytes(shards, opt)
    # gather once more, only to hand the caller the full model for the comparison
    params = []
    for i, (d_in, d_out) in enumerate(dims):
        full = gather(i)
        params += [full[: d_out * d_in].view(d_out, d_in).clone(), full[d_out * d_in: d_out * d_in + d_out].clone()]
    return ShardedRank(params=params, held_bytes=held, peak_gathered_bytes=peak_gathered, comm=comm.summary(),
                       param_count=sum(numels))
