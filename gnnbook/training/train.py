"""Training loops: full-graph node classification with early stopping, and
VGAE link prediction.  Each run returns a :class:`TrainResult` record.

Book: 4.1.1 full-graph training; 2.3 the models' reproduction; 8.2.2 a simple training case.

Used in: chapters/02_gnn_models.ipynb, chapters/04_gnn_training.ipynb,
chapters/05a_minibatch_training_and_sampling.ipynb, chapters/05e_sampler_accuracy.ipynb,
chapters/05g_historical_embeddings.ipynb, chapters/08_dgl_practice.ipynb,
labs/lab02_message_passing.ipynb, labs/lab04_minibatch.ipynb, labs/lab05b_historical_embeddings.ipynb,
labs/lab10_recommendation.ipynb.

Example:
    >>> from gnnbook.data import load_dataset
    >>> result = train_node_classifier(load_dataset("cora"), "gcn", Optim(seed=0))  # doctest: +SKIP
    >>> round(result.test_acc, 2)                                          # doctest: +SKIP
    0.81
"""
from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import dgl
import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..base.memory import PeakMemory
from ..base.records import record
from ..base.seeding import set_seed
from ..models import VGAE, build_model

# Optimiser settings from the papers (Adam, learning rate, weight decay) and one stopping rule for
# every model: keep the epoch with the best validation accuracy, stop after `patience` epochs without
# improvement.  That is GAT's rule (Velickovic et al. 2018: patience 100).  Kipf & Welling (2017)
# instead train at most 200 epochs and stop once the validation loss has not improved for 10
# epochs, keeping the last weights; the course keeps their 200-epoch cap but uses the same rule for
# all models, so that comparisons between models (and chapters) differ in the model only.
TRAIN_DEFAULTS: dict[str, dict[str, Any]] = {
    "gcn": dict(lr=0.01, weight_decay=5e-4, epochs=200, patience=100),
    "gat": dict(lr=0.005, weight_decay=5e-4, epochs=300, patience=100),
    "sage": dict(lr=0.01, weight_decay=5e-4, epochs=200, patience=100),
    "gin": dict(lr=0.01, weight_decay=5e-4, epochs=200, patience=100),
    "ggnn": dict(lr=0.01, weight_decay=5e-4, epochs=200, patience=100),
}

# Minibatch training makes many small, noisy updates an epoch where full-graph training makes one, so it
# takes a smaller learning rate than the papers' full-graph one above.  Measured with GraphSAGE: at batch 64
# and lr 0.01 one of three Amazon-Photo seeds ended at 66.5% test accuracy (full-graph 89.4%), at 0.003 all
# three at 88.5-90.4% (gnnbook.training.flows); a 20-epoch distributed run on Cora oscillated at 0.01
# (final-epoch test accuracy sd 1.3 points over 10 seeds, 0.3 at 0.003; gnnbook.distributed.config).
# GAT keeps its paper's 0.005.  Used where a minibatch run's learning rate is not given.
MINIBATCH_LR: dict[str, float] = {"sage": 0.003, "gat": 0.005}


@dataclass
class TrainResult:
    """What one training run measured."""

    model: str
    seed: int
    test_acc: float
    val_acc: float
    best_epoch: int
    epochs_run: int
    seconds_per_epoch: float  # forward + backward + step, evaluation excluded
    peak_memory_bytes: int
    history: list[dict[str, float]] = field(default_factory=list, repr=False)

    def to_dict(self, with_history: bool = False) -> dict[str, Any]:
        record = asdict(self)
        if not with_history:
            record.pop("history")
        return record


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """The share of rows whose arg-max is their label, in one process (NaN for no rows).

    Example:
        >>> accuracy(torch.tensor([[0., 1.], [1., 0.]]), torch.tensor([1, 1]))
        0.5
    """
    return float((logits.argmax(-1) == labels).float().mean()) if len(labels) else float("nan")


def correct_predictions(logits: torch.Tensor, labels: torch.Tensor) -> int:
    """How many rows' arg-max is their label: the count that processes sum before dividing by the global
    total (an accuracy over several processes; :func:`accuracy` is one process's share).

    Example:
        >>> correct_predictions(torch.tensor([[0., 1.], [1., 0.], [0., 2.]]), torch.tensor([1, 1, 1]))
        2
    """
    return int((logits.argmax(-1) == labels).sum())


def model_input(model: torch.nn.Module, feat: torch.Tensor, max_density: float = 0.1) -> torch.Tensor:
    """Sparse (CSR) features for models that accept them when few entries are
    non-zero (bag-of-words); otherwise ``feat`` unchanged."""
    if getattr(model, "accepts_sparse_input", False) and feat.device.type == "cpu":
        if float((feat != 0).float().mean()) < max_density:
            return feat.to_sparse().to_sparse_csr()  # via COO: ~20x faster than dense -> CSR in torch 2.2
    return feat


def epoch_metrics(logits: torch.Tensor, labels: torch.Tensor, masks: dict[str, torch.Tensor]) -> dict[str, float]:
    """Validation loss and accuracy and training accuracy of one evaluation pass."""
    return dict(val_loss=float(F.cross_entropy(logits[masks["val"]], labels[masks["val"]])),
                val_acc=accuracy(logits[masks["val"]], labels[masks["val"]]),
                train_acc=accuracy(logits[masks["train"]], labels[masks["train"]]))


def selection_key(val_acc: float, epoch: int, val_loss: float = 0.0) -> tuple[float, float, int]:
    """The one rule that chooses an epoch, wherever one is chosen (:class:`BestEpoch`, :func:`best_epoch_row`,
    :class:`AccuracyCurve`): the highest validation accuracy, then the lowest validation loss (where one is
    measured), then the earliest epoch.  The chosen epoch is the one with the largest key.

    Example:
        >>> max([(0, 0.5), (1, 0.7), (2, 0.7)], key=lambda p: selection_key(p[1], p[0]))
        (1, 0.7)
    """
    return (val_acc, -val_loss, -epoch)


class BestEpoch:
    """Model selection on validation accuracy (ties: lower validation loss) with
    early stopping: :meth:`update` says stop after ``patience`` epochs without
    improvement; ``state`` holds a copy of the best epoch's weights, which
    :meth:`restore` loads back when training ends.  Without a loss (``val_loss`` left at 0), ties
    keep the earlier epoch; ``val_acc`` may be any score where higher is better
    (the recommender's recall@k).

    Example:
        >>> model, best = torch.nn.Linear(1, 1), BestEpoch(patience=2)
        >>> [best.update(model, epoch, acc) for epoch, acc in enumerate([0.5, 0.7, 0.6, 0.7])]
        [False, False, False, True]
        >>> best.epoch, best.val_acc
        (1, 0.7)
        >>> best.restore(model).training
        False
    """

    def __init__(self, patience: int):
        self.patience = patience
        self.val_acc, self.val_loss, self.epoch, self.state = -1.0, float("inf"), 0, None

    def update(self, model: torch.nn.Module, epoch: int, val_acc: float, val_loss: float = 0.0) -> bool:
        if selection_key(val_acc, epoch, val_loss) > selection_key(self.val_acc, self.epoch, self.val_loss):
            self.val_acc, self.val_loss, self.epoch = val_acc, val_loss, epoch
            self.state = copy.deepcopy(model.state_dict())
        return epoch - self.epoch >= self.patience

    def restore(self, model: torch.nn.Module) -> torch.nn.Module:
        """Load the best epoch's weights back into ``model`` and put it in eval mode: the one restore of
        every training loop that selects an epoch.  Returns ``model``."""
        if self.state is None:
            raise RuntimeError("no epoch was evaluated (update() was never called), so there are no best weights")
        model.load_state_dict(self.state)
        return model.eval()


def best_epoch_row(history: list[dict[str, Any]]) -> dict[str, Any]:
    """The row of ``history`` (one dict per epoch, with ``epoch`` and ``val_acc``) of the best validation
    accuracy, the earliest of equals: the selection of the distributed trainer and its one-process baseline.

    Example:
        >>> best_epoch_row([dict(epoch=0, val_acc=0.5), dict(epoch=1, val_acc=0.7), dict(epoch=2, val_acc=0.7)])
        {'epoch': 1, 'val_acc': 0.7}
    """
    return max(history, key=lambda h: selection_key(h["val_acc"], h["epoch"]))


@record
@dataclass
class AccuracyCurve:
    """Validation and test accuracy at each evaluation (an epoch, or a parameter server's update) and the
    evaluation chosen on validation accuracy, the earliest of equals: how chapter 6's full-graph runs, which
    keep no weights to restore, report their accuracy (:class:`BestEpoch` is the selection of the loops here).

    Example:
        >>> curve = AccuracyCurve()
        >>> for at, val, test in [(10, 0.5, 0.4), (20, 0.7, 0.6), (30, 0.7, 0.65)]:
        ...     curve.add(at, val, test)
        >>> curve.best_at, curve.best_val, curve.test_at_best_val
        (20, 0.7, 0.6)
    """

    points: list[tuple[int, float, float]] = field(default_factory=list)  # (epoch or update, validation, test)

    def add(self, at: int, val_acc: float, test_acc: float) -> None:
        self.points.append((int(at), float(val_acc), float(test_acc)))

    @property
    def _best(self) -> tuple[int, float, float]:
        if not self.points:
            raise ValueError("the curve has no evaluation yet: add() one before asking for the best")
        return max(self.points, key=lambda p: selection_key(p[1], p[0]))

    @property
    def best_at(self) -> int:
        """The epoch (or update) of the best validation accuracy."""
        return self._best[0]

    @property
    def best_val(self) -> float:
        return self._best[1]

    @property
    def test_at_best_val(self) -> float:
        return self._best[2]


@dataclass(frozen=True)
class Optim:
    """The optimisation knobs of one training run (book 4.1.1): the seed (weights, dropout, minibatches), Adam's
    learning rate and weight decay, the epoch budget and early stopping's patience.  None takes the model's
    default: :data:`TRAIN_DEFAULTS` (one table for every loop; minibatch loops replace its epochs and patience
    by their own).  Every training loop of the course takes one, instead of five keyword arguments each.

    Example:
        >>> Optim(lr=0.05).resolved("gcn")
        Optim(seed=0, lr=0.05, weight_decay=0.0005, epochs=200, patience=100)
        >>> Optim(seed=3, epochs=10).with_seed(4).seed
        4
    """

    seed: int = 0
    lr: float | None = None
    weight_decay: float | None = None
    epochs: int | None = None
    patience: int | None = None

    def resolved(self, model_name: str, **loop_defaults: Any) -> "Optim":
        """Every None replaced: by ``loop_defaults`` (a loop's own epochs or patience), then by
        ``model_name``'s :data:`TRAIN_DEFAULTS`."""
        given = {k: v for k, v in asdict(self).items() if k != "seed"}
        settings = training_settings(model_name,
                                     **{k: loop_defaults.get(k) if v is None else v for k, v in given.items()})
        return Optim(seed=self.seed, **{k: settings[k] for k in given})

    def with_seed(self, seed: int) -> "Optim":
        return replace(self, seed=seed)

    def with_defaults(self, **defaults: Any) -> "Optim":
        """Each None field named in ``defaults`` set to its default (a comparison's own budget); the rest
        stay as they are (None: the model's default, when a loop resolves it).

        Example:
            >>> Optim(epochs=5).with_defaults(epochs=100, patience=10)
            Optim(seed=0, lr=None, weight_decay=None, epochs=5, patience=10)
        """
        return replace(self, **{k: v for k, v in defaults.items() if getattr(self, k) is None})


def training_settings(model_name: str, **overrides: Any) -> dict[str, Any]:
    """``model_name``'s :data:`TRAIN_DEFAULTS` with every override that is not None.

    Example:
        >>> training_settings("gcn", lr=0.05, epochs=None)["lr"]
        0.05
    """
    settings = dict(TRAIN_DEFAULTS.get(model_name, TRAIN_DEFAULTS["gcn"]))
    settings.update({key: value for key, value in overrides.items() if value is not None})
    return settings


def adam_settings(model_name: str, lr: float | None = None, weight_decay: float | None = None) -> tuple[float, float]:
    """Adam's (learning rate, weight decay) for ``model_name``: the given ones, else :data:`TRAIN_DEFAULTS`'s,
    for the loops whose arguments arrive as JSON (no :class:`Optim` across processes).

    Example:
        >>> adam_settings("gcn"), adam_settings("gat", lr=0.01)
        ((0.01, 0.0005), (0.01, 0.0005))
    """
    optim = Optim(lr=lr, weight_decay=weight_decay).resolved(model_name)
    return optim.lr, optim.weight_decay


def prepare_graph(graph: dgl.DGLGraph) -> dgl.DGLGraph:
    """Add exactly one self-loop per node, as GCN's renormalisation expects."""
    return dgl.add_self_loop(dgl.remove_self_loop(graph))


def train_node_classifier(graph: dgl.DGLGraph, model_name: str = "gcn", optim: Optim | None = None,
                          **options: Any) -> TrainResult:
    """Train ``model_name`` full-graph on ``graph``'s train mask, keep the
    weights of the epoch with the best validation accuracy (ties: lower
    validation loss), stop after ``patience`` epochs without improvement, and
    report test accuracy for those weights.  ``optim`` holds the seed and the
    optimiser's settings (:class:`Optim`; None: the model's defaults, seed 0);
    ``options`` are :func:`fit_node_classifier`'s (device, progress, model
    options); only the result is returned."""
    return fit_node_classifier(graph, model_name, optim, **options)[1]


def fit_node_classifier(graph: dgl.DGLGraph, model_name: str = "gcn", optim: Optim | None = None,
                        device: str = "cpu", progress: bool = True,
                        **model_options: Any) -> tuple[torch.nn.Module, TrainResult]:
    """:func:`train_node_classifier` that also returns the trained model (the
    best epoch's weights, in eval mode), to look inside it afterwards.

    Example:
        >>> from gnnbook.data import load_dataset
        >>> gat, result = fit_node_classifier(load_dataset("cora"), "gat", Optim(epochs=5))  # doctest: +SKIP
        >>> gat.layers[0]                                                                    # doctest: +SKIP
        GATConv(...)
    """
    optim = (optim or Optim()).resolved(model_name)
    seed = optim.seed
    set_seed(seed)
    g = prepare_graph(graph).to(device)
    feat, labels = g.ndata["feat"], g.ndata["label"]
    masks = {split: g.ndata[f"{split}_mask"] for split in ("train", "val", "test")}
    model = build_model(model_name, feat.shape[1], int(labels.max()) + 1, **model_options).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=optim.lr, weight_decay=optim.weight_decay)
    x = model_input(model, feat)

    best, history, train_seconds = BestEpoch(optim.patience), [], 0.0
    bar = tqdm(range(optim.epochs), desc=f"{model_name} seed {seed}", disable=not progress, leave=False)
    with PeakMemory(device) as peak:
        for epoch in bar:
            model.train()
            start = time.perf_counter()
            logits = model(g, x)
            loss = F.cross_entropy(logits[masks["train"]], labels[masks["train"]])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            train_seconds += time.perf_counter() - start

            model.eval()
            with torch.no_grad():
                logits = model(g, x)
            metrics = epoch_metrics(logits, labels, masks)
            history.append(dict(epoch=epoch, loss=float(loss), **metrics))
            # refresh=False: redraw at tqdm's pace, not every epoch; a widget message per
            # epoch floods Jupyter's IOPub channel, which then drops messages.
            bar.set_postfix(loss=f"{float(loss):.3f}", val_acc=f"{metrics['val_acc']:.3f}", refresh=False)
            if best.update(model, epoch, metrics["val_acc"], metrics["val_loss"]):
                break
    best.restore(model)
    with torch.no_grad():
        logits = model(g, x)
    return model, TrainResult(
        model=model_name,
        seed=seed,
        test_acc=accuracy(logits[masks["test"]], labels[masks["test"]]),
        val_acc=best.val_acc,
        best_epoch=best.epoch,
        epochs_run=len(history),
        seconds_per_epoch=train_seconds / max(1, len(history)),
        peak_memory_bytes=peak.peak_bytes,
        history=history,
    )


def summarize(results: list[TrainResult]) -> dict[str, Any]:
    """Mean and standard deviation over seeds, as the CLI's JSON reports them."""
    acc = np.array([r.test_acc for r in results])
    return dict(
        model=results[0].model,
        seeds=[r.seed for r in results],
        test_acc_mean=float(acc.mean()),
        test_acc_std=float(acc.std()),
        test_acc=[float(a) for a in acc],
        seconds_per_epoch=float(np.mean([r.seconds_per_epoch for r in results])),
        peak_memory_bytes=int(max(r.peak_memory_bytes for r in results)),
        epochs_run=[r.epochs_run for r in results],
    )


def train_over_seeds(graph: dgl.DGLGraph, model_name: str = "gcn", seeds: int | list[int] = 5,
                     optim: Optim | None = None, progress: bool = True, **options: Any) -> list[TrainResult]:
    """Train once per seed (``seeds`` is a count, starting at 0, or a list), each with ``optim`` (its seed
    replaced); ``options`` as :func:`fit_node_classifier`'s."""
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    return [train_node_classifier(graph, model_name, (optim or Optim()).with_seed(s), progress=progress, **options)
            for s in tqdm(seed_list, desc=f"{model_name} seeds", disable=not progress)]


# --- link prediction (VGAE) -------------------------------------------------

def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve = probability a positive outranks a negative
    (Mann-Whitney U, ties counted half)."""
    from scipy.stats import rankdata

    ranks = rankdata(scores)
    pos = labels.astype(bool)
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def split_edges(graph: dgl.DGLGraph, val_frac: float = 0.05, test_frac: float = 0.1, seed: int = 0):
    """Hold out undirected edges for validation and testing, with as many
    sampled non-edges; returns the training graph and the held-out pairs."""
    rng = np.random.default_rng(seed)
    src, dst = (t.numpy() for t in graph.edges())
    upper = src < dst
    u, v = src[upper], dst[upper]
    order = rng.permutation(len(u))
    n_val, n_test = int(val_frac * len(u)), int(test_frac * len(u))
    held = {"val": order[:n_val], "test": order[n_val : n_val + n_test]}
    train = order[n_val + n_test :]
    n = graph.num_nodes()
    existing = set((src * n + dst).tolist())
    negatives = []
    while len(negatives) < n_val + n_test:
        a, b = rng.integers(0, n, 2)
        if a != b and a * n + b not in existing:
            negatives.append((a, b))
            existing.add(a * n + b)
            existing.add(b * n + a)
    negatives = np.array(negatives)
    pairs = {
        "val": (u[held["val"]], v[held["val"]], negatives[:n_val]),
        "test": (u[held["test"]], v[held["test"]], negatives[n_val:]),
    }
    train_graph = dgl.graph((np.concatenate([u[train], v[train]]), np.concatenate([v[train], u[train]])), num_nodes=n)
    train_graph.ndata["feat"] = graph.ndata["feat"]
    return train_graph, pairs


def _pair_auc(model: VGAE, z: torch.Tensor, pos_u, pos_v, negatives) -> float:
    pos = model.score(z, torch.as_tensor(pos_u), torch.as_tensor(pos_v))
    neg = model.score(z, torch.as_tensor(negatives[:, 0]), torch.as_tensor(negatives[:, 1]))
    scores = torch.cat([pos, neg]).detach().numpy()
    return roc_auc(scores, np.r_[np.ones(len(pos)), np.zeros(len(neg))])


def train_vgae(graph: dgl.DGLGraph, epochs: int = 400, lr: float = 0.01, seed: int = 0,
               negatives_per_edge: int = 1, progress: bool = True) -> dict[str, float]:
    """Train a VGAE on 85% of the edges; return validation and test ROC-AUC.

    The reconstruction loss scores every training edge against freshly sampled
    random node pairs each epoch (negative sampling), instead of the paper's
    dense N x N adjacency: the same objective in expectation, O(E) not O(N^2).
    """
    set_seed(seed)
    train_graph, pairs = split_edges(graph, seed=seed)
    g = prepare_graph(train_graph)
    model = VGAE(g.ndata["feat"].shape[1])
    feat = model_input(model, g.ndata["feat"])
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    src, dst = g.edges()
    n = g.num_nodes()
    for _ in tqdm(range(epochs), desc="vgae", disable=not progress, leave=False):
        model.train()
        z, mean, log_std = model.encode(g, feat)
        neg_src = torch.randint(0, n, (negatives_per_edge * len(src),))
        neg_dst = torch.randint(0, n, (negatives_per_edge * len(src),))
        pos, neg = model.score(z, src, dst), model.score(z, neg_src, neg_dst)
        recon = F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos)) + \
            F.binary_cross_entropy_with_logits(neg, torch.zeros_like(neg))
        kl = -0.5 / n * torch.mean(torch.sum(1 + 2 * log_std - mean**2 - (2 * log_std).exp(), 1))
        loss = recon + kl
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        z, _, _ = model.encode(g, feat)
    return {split: _pair_auc(model, z, *pairs[split]) for split in ("val", "test")}
