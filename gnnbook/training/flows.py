"""Full-graph against minibatch training on the same data, each trained to convergence.

Book: 4.1 full-graph against minibatch training.

Used in: chapters/04_gnn_training.ipynb, chapters/05e_sampler_accuracy.ipynb.

"Minibatch training reaches full-graph accuracy" is a claim about converged
models: both flows train until validation accuracy stops improving (the
weights of the best validation epoch are kept, :class:`gnnbook.training.train.BestEpoch`),
with an epoch budget large enough that early stopping, not the budget, ends
the run, and the accuracies are means over seeds (seed ``s`` gives both flows
the same initial weights).  :func:`compare_flows` runs both and returns the
runs; :attr:`FlowComparison.converged` says whether every run stopped early.

Example:
    >>> from gnnbook.data import load_dataset
    >>> cmp = compare_flows(load_dataset("cora"), "sage", seeds=[0])  # doctest: +SKIP
    >>> abs(cmp.gap) < 0.02, cmp.converged                            # doctest: +SKIP
    (True, True)
"""
from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any, Sequence

import dgl
import numpy as np

from ..base.memory import release_free_memory
from .minibatch import Batches, train_minibatch
from .train import MINIBATCH_LR, Optim, TrainResult, train_node_classifier

# Epoch budgets are upper bounds: a run ends `patience` epochs after its best
# validation epoch.  A minibatch epoch makes ceil(train nodes / batch) updates,
# a full-graph epoch one, so the minibatch side needs fewer epochs.
# The minibatch side takes GraphSAGE's minibatch learning rate (train.MINIBATCH_LR, with the
# measurement behind it); at 0.003 cora (80.4% mean) and citeseer (69.3%) stay at full-graph accuracy.
FLOW_DEFAULTS: dict[str, float] = dict(full_epochs=400, full_patience=50, mb_epochs=300, mb_patience=30,
                                       mb_lr=MINIBATCH_LR["sage"])


@dataclass
class FlowComparison:
    """The runs of both flows, one per seed, in seed order, and the patience
    (full-graph, minibatch) they were trained with."""

    full: list[TrainResult]
    minibatch: list[TrainResult]
    patience: tuple[int, int]

    @property
    def full_acc(self) -> float:
        return float(np.mean([r.test_acc for r in self.full]))

    @property
    def minibatch_acc(self) -> float:
        return float(np.mean([r.test_acc for r in self.minibatch]))

    @property
    def gap(self) -> float:
        """Full-graph minus minibatch mean test accuracy (positive: minibatch is below)."""
        return self.full_acc - self.minibatch_acc

    @property
    def converged(self) -> bool:
        """Every run stopped on patience, before its epoch budget ran out."""
        return all(r.epochs_run - 1 - r.best_epoch >= patience
                   for runs, patience in zip((self.full, self.minibatch), self.patience) for r in runs)

    def rows(self, minibatch_label: str = "minibatch") -> list[dict[str, Any]]:
        """One summary row per flow (means over seeds), for a table."""
        return [_summary("full-graph", self.full), _summary(minibatch_label, self.minibatch)]


def _summary(flow: str, runs: list[TrainResult]) -> dict[str, Any]:
    acc = [r.test_acc for r in runs]
    return dict(flow=flow, test_acc=float(np.mean(acc)), test_acc_std=float(np.std(acc)),
                best_epoch=float(np.mean([r.best_epoch for r in runs])),
                epochs_run=float(np.mean([r.epochs_run for r in runs])),
                seconds_per_epoch=float(np.mean([r.seconds_per_epoch for r in runs])),
                peak_memory_MB=max(r.peak_memory_bytes for r in runs) / 1e6)


def compare_flows(graph: dgl.DGLGraph, model_name: str = "sage", seeds: Sequence[int] = (0, 1),
                  batches: Batches | None = None, full: Optim | None = None, minibatch: Optim | None = None,
                  device: str = "cpu", progress: bool = False, **model_options: Any) -> FlowComparison:
    """Train ``model_name`` full-graph (with ``full``) and on sampled minibatches (with ``minibatch``,
    batched as ``batches``; default fanouts 10, 10 and batch 64) once per seed, each to convergence by
    validation early stopping.  Each side's None epochs and patience, and the minibatch side's None learning
    rate, take :data:`FLOW_DEFAULTS`; the seed of each run is one of ``seeds``.

    More than 8 parameters: ``model_options`` pass through to :func:`gnnbook.models.build_model` unchanged.

    Example:
        >>> from gnnbook.data import load_dataset
        >>> flows = compare_flows(load_dataset("cora"), "sage", [0], Batches([10, 10], 64),
        ...                       minibatch=Optim(patience=20))                               # doctest: +SKIP
    """
    full_optim = (full or Optim()).with_defaults(epochs=FLOW_DEFAULTS["full_epochs"],
                                                 patience=FLOW_DEFAULTS["full_patience"])
    minibatch_optim = (minibatch or Optim()).with_defaults(epochs=FLOW_DEFAULTS["mb_epochs"],
                                                           patience=FLOW_DEFAULTS["mb_patience"],
                                                           lr=FLOW_DEFAULTS["mb_lr"])
    batches = batches or Batches((10, 10), 64)
    full_runs, minibatch_runs = [], []
    for seed in seeds:
        gc.collect()
        release_free_memory()  # each run's peak starts from the live set
        full_runs.append(train_node_classifier(graph, model_name, full_optim.with_seed(seed), device=device,
                                               progress=progress, **model_options))
        gc.collect()
        release_free_memory()
        minibatch_runs.append(train_minibatch(graph, model_name, minibatch_optim.with_seed(seed), batches,
                                              device=device, progress=progress, **model_options))
    return FlowComparison(full_runs, minibatch_runs, (full_optim.patience, minibatch_optim.patience))

