"""Spatio-temporal forecasting with index-batching: one copy of the series,
a window is an index range sliced when the batch is made.

Book: 2.4 applications (traffic forecasting), beyond the book.

Used in: chapters/09_outlook.ipynb, labs/lab11_spatiotemporal_index_batching.ipynb.

Most spatio-temporal GNN loaders *materialise* their snapshots: every sliding
window of ``past`` input steps and ``horizon`` target steps is copied, so the
dataset holds about ``past + horizon`` copies of the series.  PGT-I
(index-batching for PyTorch Geometric Temporal; Ockerman et al., SC'25, arXiv 2507.11683) keeps
the series once and turns a window index ``i`` into the slices
``series[i : i + past]`` and ``series[i + past : i + past + horizon]`` at batch
time, reporting up to 89% less memory.  PGT 0.56 ships this, but importing
it needs ``torch-sparse``, which has no build for the course's pinned torch,
so :class:`IndexDataset` is written here.

The model is a small T-GCN (Zhao et al., "T-GCN: A Temporal Graph
Convolutional Network for Traffic Prediction", IEEE T-ITS 2019): a GRU whose
gates are graph convolutions over the sensor graph; its output is added to
the last observed speed (a skip connection, so training starts from
"no change").  :func:`fit` trains it
on one process or, through :func:`train_distributed` under
:func:`gnnbook.base.launch.run`, on several: each rank keeps the series once,
slices its share of every batch's indices, and the gradients are all-reduced.

Example:
    >>> series = torch.arange(20.0).reshape(10, 2)
    >>> data = IndexDataset(series, past=3, horizon=2)
    >>> len(data), data[0][1].tolist()
    (6, [[6.0, 7.0], [8.0, 9.0]])
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..base.records import record
from ..graph.normalisation import gcn_dense_adjacency


def _check_window(steps: int, past: int, horizon: int, start: int, stop: int) -> None:
    if past < 1 or horizon < 1:
        raise ValueError(f"past and horizon must be at least 1, got past={past}, horizon={horizon}")
    if not 0 <= start <= stop <= steps:
        raise ValueError(f"need 0 <= start <= stop <= {steps} steps, got start={start}, stop={stop}")
    if stop - start < past + horizon:
        raise ValueError(f"a window needs past + horizon = {past + horizon} steps, but steps {start}..{stop} "
                         f"hold only {stop - start}: shorten past or horizon, or use a longer range")


class IndexDataset:
    """Windows of ``series`` [steps, nodes] over steps ``start..stop``, sliced on demand.

    Window ``i`` is ``(series[s : s + past], series[s + past : s + past + horizon])``
    with ``s = start + i``; both are views, nothing is copied until :meth:`batch`.

    Example:
        >>> IndexDataset(torch.zeros(30, 4), past=12, horizon=12).batch(torch.tensor([0, 6]))[0].shape
        torch.Size([2, 12, 4])
    """

    def __init__(self, series: torch.Tensor, past: int, horizon: int, start: int = 0, stop: int | None = None):
        if series.dim() != 2:
            raise ValueError(f"series must be [steps, nodes], got shape {tuple(series.shape)}")
        stop = series.shape[0] if stop is None else stop
        _check_window(series.shape[0], past, horizon, start, stop)
        self.series, self.past, self.horizon, self.start, self.stop = series, past, horizon, start, stop

    def __len__(self) -> int:
        return self.stop - self.start - self.past - self.horizon + 1

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not -len(self) <= i < len(self):
            raise IndexError(f"window {i} out of range for {len(self)} windows")
        s = self.start + (i % len(self))
        return self.series[s:s + self.past], self.series[s + self.past:s + self.past + self.horizon]

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Windows ``indices`` stacked: inputs [B, past, nodes], targets [B, horizon, nodes]."""
        steps = self.start + indices.reshape(-1, 1) + torch.arange(self.past + self.horizon)
        both = self.series[steps]
        return both[:, :self.past], both[:, self.past:]

    @property
    def nbytes(self) -> int:
        """Bytes the dataset holds: the one series."""
        return self.series.numel() * self.series.element_size()


class SnapshotDataset(IndexDataset):
    """The same windows, materialised: every window copied up front (as most ST-GNN loaders do).

    Example:
        >>> SnapshotDataset(torch.zeros(30, 4), past=12, horizon=12).inputs.shape
        torch.Size([7, 12, 4])
    """

    def __init__(self, series: torch.Tensor, past: int, horizon: int, start: int = 0, stop: int | None = None):
        super().__init__(series, past, horizon, start, stop)
        first = start + torch.arange(len(self)).reshape(-1, 1)
        self.inputs = series[first + torch.arange(past)]  # advanced indexing copies: once each
        self.targets = series[first + past + torch.arange(horizon)]
        self.series = None  # only the copies are kept

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inputs[i], self.targets[i]

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inputs[indices], self.targets[indices]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.inputs, self.targets))


def batch_order(num_windows: int, batch_size: int, epoch: int, seed: int = 0) -> list[torch.Tensor]:
    """The shuffled full batches of one epoch (the last partial batch is dropped)."""
    if batch_size < 1 or batch_size > num_windows:
        raise ValueError(f"batch_size must be in 1..{num_windows}, got {batch_size}")
    order = torch.randperm(num_windows, generator=torch.Generator().manual_seed(seed * 1000 + epoch))
    return list(order[:num_windows // batch_size * batch_size].split(batch_size))


@dataclass(frozen=True)
class Split:
    """A z-scored series and its train/test datasets (statistics from the training steps only)."""

    series: torch.Tensor
    mean: float
    std: float
    train_stop: int  # steps 0..train_stop train; test windows start at train_stop - past


def split_series(speed: torch.Tensor, past: int, horizon: int, train_share: float = 0.8) -> Split:
    """Z-score ``speed`` with the first ``train_share`` of the steps' mean and std."""
    if not 0 < train_share < 1:
        raise ValueError(f"train_share must be in (0, 1), got {train_share}")
    steps = speed.shape[0]
    train_stop = int(steps * train_share)
    _check_window(steps, past, horizon, 0, train_stop)
    _check_window(steps, past, horizon, train_stop - past, steps)
    mean, std = float(speed[:train_stop].mean()), float(speed[:train_stop].std())
    return Split(((speed - mean) / std).contiguous(), mean, std, train_stop)


class TGCN(nn.Module):
    """T-GCN: a GRU over the nodes whose gates are graph convolutions
    (``A_hat [x, h] W``, ``A_hat`` the symmetric-normalised adjacency with self-loops).

    Input [B, past, nodes] -> prediction [B, horizon, nodes].

    Example:
        >>> TGCN(torch.eye(3), hidden=4, horizon=2)(torch.zeros(5, 6, 3)).shape
        torch.Size([5, 2, 3])
    """

    def __init__(self, adjacency: torch.Tensor, hidden: int = 32, horizon: int = 12):
        super().__init__()
        a_hat = gcn_dense_adjacency(adjacency.float() + torch.eye(adjacency.shape[0]))
        self.register_buffer("a_hat", a_hat.to_sparse())
        self.hidden = hidden
        self.gates = nn.Linear(1 + hidden, 2 * hidden)
        self.candidate = nn.Linear(1 + hidden, hidden)
        self.out = nn.Linear(hidden, horizon)

    def _conv(self, z: torch.Tensor) -> torch.Tensor:
        # z [nodes, B, F] -> A_hat z, one sparse product for the whole batch
        n, b, f = z.shape
        return torch.sparse.mm(self.a_hat, z.reshape(n, b * f)).reshape(n, b, f)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, steps, n = x.shape
        inputs = x.permute(2, 0, 1)  # [nodes, B, past]
        h = x.new_zeros(n, b, self.hidden)
        for t in range(steps):
            xt = inputs[:, :, t, None]
            update, reset = torch.sigmoid(self.gates(self._conv(torch.cat([xt, h], -1)))).chunk(2, -1)
            c = torch.tanh(self.candidate(self._conv(torch.cat([xt, reset * h], -1))))
            h = update * h + (1 - update) * c
        # the last observed speed plus a learnt change per future step
        return (inputs[:, :, -1:] + self.out(h)).permute(1, 2, 0)


def fit(model: nn.Module, data: IndexDataset, epochs: int, batch_size: int, lr: float = 0.01, seed: int = 0,
        max_batches: int | None = None) -> list[float]:
    """Train with Adam on the mean squared error; returns each epoch's mean loss.

    Inside a process group of ``world`` ranks (:func:`gnnbook.base.launch.run`), rank ``r`` takes
    the ``r``-th equal share of every batch's window indices, and gradients are
    averaged by all-reduce: the same steps as one process on the whole batch.
    ``max_batches`` stops each epoch early (quick runs).
    """
    import torch.distributed as dist

    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    if batch_size % world:
        raise ValueError(f"batch_size {batch_size} must be a multiple of the {world} ranks")
    optimiser = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for epoch in range(epochs):
        total, batches = 0.0, batch_order(len(data), batch_size, epoch, seed)[:max_batches]
        for indices in batches:
            x, y = data.batch(indices.chunk(world)[rank])
            loss = nn.functional.mse_loss(model(x), y)
            optimiser.zero_grad()
            loss.backward()
            if world > 1:
                for p in model.parameters():
                    dist.all_reduce(p.grad)
                    p.grad /= world
                reported = loss.detach().clone()
                dist.all_reduce(reported)
                loss = reported / world
            optimiser.step()
            total += float(loss)
        losses.append(total / len(batches))
    return losses


@torch.no_grad()
def evaluate(model: nn.Module, data: IndexDataset, split: Split, batch_size: int = 256) -> dict[str, float]:
    """MAE and RMSE in the series' own units (mph), over every window of ``data``."""
    model.eval()
    abs_sum, sq_sum, count = 0.0, 0.0, 0
    for indices in torch.arange(len(data)).split(batch_size):
        x, y = data.batch(indices)
        error = (model(x) - y) * split.std
        abs_sum += float(error.abs().sum())
        sq_sum += float((error ** 2).sum())
        count += error.numel()
    model.train()
    return {"mae": abs_sum / count, "rmse": (sq_sum / count) ** 0.5}


def historical_average(data: IndexDataset, split: Split) -> dict[str, float]:
    """The baseline of T-GCN's paper: predict every future step as the mean of the past window."""
    x, y = data.batch(torch.arange(len(data)))
    error = (x.mean(1, keepdim=True) - y) * split.std
    return {"mae": float(error.abs().mean()), "rmse": float((error ** 2).mean().sqrt())}


@record
@dataclass
class TemporalRank:
    """What one rank of :func:`train_distributed` ends with (the weights are the same on every rank)."""

    rank: int
    losses: list[float]  # the mean training loss, per epoch
    series_bytes: int  # what this rank's IndexDataset holds: the series, once
    params: list[torch.Tensor]  # the trained model's parameters


def train_distributed(dataset: str = "los-loop", past: int = 12, horizon: int = 12, hidden: int = 16,
                      epochs: int = 1, batch_size: int = 64, lr: float = 0.01, seed: int = 0,
                      max_batches: int | None = None) -> TemporalRank:
    """One rank of distributed index-batching (run it with :func:`gnnbook.base.launch.run`):
    the rank loads the series once, slices its share of every batch and all-reduces gradients;
    returns a :class:`TemporalRank`.

    Example:
        >>> from gnnbook.base.launch import run
        >>> out = run("gnnbook.applications.temporal:train_distributed", 2, {"epochs": 1},
        ...           deadline_s=120)  # doctest: +SKIP

    More than 8 parameters: a rank's entry point for gnnbook.base.launch.run, whose arguments arrive in each
    process as JSON: each knob is its own argument (no settings objects across processes).
    """
    import torch.distributed as dist

    from ..data import load_traffic

    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    torch.set_num_threads(1)
    traffic = load_traffic(dataset, download=False)
    split = split_series(traffic.speed, past, horizon)
    data = IndexDataset(split.series, past, horizon, 0, split.train_stop)
    torch.manual_seed(seed)
    model = TGCN(traffic.adjacency, hidden, horizon)
    losses = fit(model, data, epochs, batch_size, lr, seed, max_batches)
    return TemporalRank(rank=rank, losses=losses, series_bytes=data.nbytes,
                        params=[p.detach().clone() for p in model.parameters()])
