"""The small, seeded problem every parallel form trains: an MLP regressing a
random "teacher" network's output.  Every rank rebuilds the same data and the
same initial weights from the seed, so nothing but the parallel scheme differs
between a distributed run and the one-process reference.

Book: 3.1 training basics (the problem every parallel form trains).

Used in: chapters/03_distributed_ml.ipynb.

Example:
    >>> x, y = make_data(8, 4, 2, seed=0)
    >>> tuple(x.shape), tuple(y.shape)
    ((8, 4), (8, 2))
    >>> [p.shape[0] for p in make_mlp([4, 16, 2], seed=0).parameters()]
    [16, 16, 2, 2]
"""
from __future__ import annotations

import torch
from torch import nn


def make_data(n: int, d_in: int, d_out: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d_in, generator=gen)
    teacher = torch.randn(d_in, d_out, generator=gen) / d_in ** 0.5
    y = torch.tanh(x @ teacher) + 0.05 * torch.randn(n, d_out, generator=gen)
    return x, y


def make_mlp(sizes: list[int], seed: int = 0) -> nn.Sequential:
    """Linear layers with tanh between them (the last layer is linear)."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


def shard(t: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rows ``rank::world_size`` would interleave; contiguous equal blocks keep it simple."""
    if t.shape[0] % world_size:
        raise ValueError(f"{t.shape[0]} rows do not split evenly over {world_size} ranks; pick n divisible by it")
    per = t.shape[0] // world_size
    return t[rank * per:(rank + 1) * per]


def train_single(sizes: list[int], n: int = 256, steps: int = 20, lr: float = 0.1, seed: int = 0,
                 optimizer: str = "sgd") -> dict[str, object]:
    """The one-process reference: full-batch training; returns final parameters and the loss curve.

    Example:
        >>> out = train_single([4, 8, 2], n=16, steps=3)
        >>> len(out["loss"]), len(out["params"])
        (3, 4)
    """
    x, y = make_data(n, sizes[0], sizes[-1], seed)
    model = make_mlp(sizes, seed)
    opt = make_optimizer(optimizer, model.parameters(), lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {"params": [p.detach().clone() for p in model.parameters()], "loss": losses}


def make_optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    raise ValueError(f"optimizer must be 'sgd' or 'adam', got {name!r}")


def max_abs_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """Largest elementwise difference between two parameter lists of equal shapes."""
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        raise ValueError("parameter lists differ in length or shapes")
    return max(float((x - y).abs().max()) for x, y in zip(a, b))
