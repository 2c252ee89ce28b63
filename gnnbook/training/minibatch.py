"""Minibatch node classification with DGL's neighbour sampler, and the
counters chapter 4 uses to explain it: how many nodes a minibatch depends on,
and how many bytes of features a minibatch must fetch from another machine.

Book: 4.1.2 minibatch training; 4.3.1 minibatch distributed training; 8.2.3.

Used in: chapters/04_gnn_training.ipynb, chapters/05d_communication.ipynb,
chapters/08_dgl_practice.ipynb, labs/lab04_minibatch.ipynb, labs/lab05_feature_cache.ipynb.

A minibatch is a set of *seed* (output) nodes.  ``NeighborSampler([f1, ..., fL])``
walks back ``L`` hops, keeping at most ``f`` in-neighbours per node per hop,
and returns one message-flow *block* per layer; the first block's source
nodes are the *input nodes* whose features the step needs.  One step:
sample blocks, gather the input features, run the model on the blocks, and
compute the loss on the seed nodes only.

Example:
    >>> from gnnbook.data import load_dataset
    >>> result = train_minibatch(load_dataset("cora"), "sage", Optim(seed=0), Batches([10, 10]))  # doctest: +SKIP
    >>> result.test_acc > 0.75                                                                   # doctest: +SKIP
    True
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import dgl
import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..base.memory import PeakMemory, release_free_memory
from ..models import MODEL_DEFAULTS, build_model
from ..base.seeding import set_seed
from .train import BestEpoch, Optim, TrainResult, accuracy, epoch_metrics, model_input, prepare_graph

# DGL suggests CPU affinity for its worker processes on every epoch; we use none.
warnings.filterwarnings("ignore", message="Dataloader CPU affinity opt is not enabled")

# Minibatch defaults (optimiser settings as in full-graph training, from
# gnnbook.training.train).  Fewer epochs and less patience than full-graph training:
# an epoch makes several updates, not one.
MINIBATCH_DEFAULTS: dict[str, Any] = dict(batch_size=64, epochs=100, patience=30)


def model_layers(model_name: str, model_options: dict[str, Any]) -> int:
    return int(model_options.get("num_layers", MODEL_DEFAULTS.get(model_name.lower(), {}).get("num_layers", 2)))


def check_fanouts(fanouts: Sequence[int], num_layers: int) -> list[int]:
    """Fanouts as a list, one per layer (``-1`` = all neighbours); a clear error otherwise."""
    fanouts = [int(f) for f in fanouts]
    if len(fanouts) != num_layers:
        raise ValueError(f"got {len(fanouts)} fanouts {fanouts} for a {num_layers}-layer model; "
                         f"give one fanout per layer, e.g. fanouts={[10] * num_layers}")
    if any(f == 0 or f < -1 for f in fanouts):
        raise ValueError(f"fanouts must be positive (or -1 for all neighbours), got {fanouts}")
    return fanouts


class SerialSamplingLoader:
    """A DGL DataLoader whose sampling runs on one OpenMP thread.

    DGL samples neighbours in parallel with one random stream per thread, and
    which thread draws for which node changes from run to run, so with two or
    more threads the same seed gives different minibatches.  Even ``dgl.seed``
    seeds the per-thread streams in a parallel loop, so which seed the main
    thread gets can vary.  Here each pass re-seeds DGL on one thread from
    NumPy's generator (seeded by :func:`gnnbook.training.train.set_seed`) and samples
    on one thread (the model's kernels keep all threads): a seeded run repeats.
    """

    def __init__(self, loader: dgl.dataloading.DataLoader):
        self.loader = loader

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        sampler_seed = int(np.random.randint(0, 2**31 - 1))
        threads = dgl.utils.get_num_threads()
        dgl.utils.set_num_threads(1)
        try:
            dgl.seed(sampler_seed)
            batches = iter(self.loader)  # shuffles with NumPy's generator
        finally:
            dgl.utils.set_num_threads(threads)
        while True:
            threads = dgl.utils.get_num_threads()
            dgl.utils.set_num_threads(1)
            try:
                batch = next(batches)
            except StopIteration:
                return
            finally:
                dgl.utils.set_num_threads(threads)
            yield batch


def neighbor_loader(graph: dgl.DGLGraph, seed_nodes: torch.Tensor, fanouts: Sequence[int],
                    batch_size: int, shuffle: bool = True, device: str = "cpu") -> SerialSamplingLoader:
    """Minibatches ``(input_nodes, output_nodes, blocks)`` from DGL's
    ``NeighborSampler`` and ``DataLoader``.

    Sampling runs in the calling process (``num_workers=0``) on one thread, so
    :func:`gnnbook.training.train.set_seed` makes its shuffling (NumPy) and sampling
    (DGL) repeat exactly.

    Example:
        >>> g = dgl.graph(([0, 1, 2], [1, 2, 0]))
        >>> input_nodes, output_nodes, blocks = next(iter(neighbor_loader(g, torch.tensor([0]), [5], 1)))
        >>> output_nodes.tolist(), len(blocks)
        ([0], 1)
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    sampler = dgl.dataloading.NeighborSampler(list(fanouts))
    return SerialSamplingLoader(dgl.dataloading.DataLoader(
        graph, seed_nodes, sampler, batch_size=batch_size, shuffle=shuffle, drop_last=False, num_workers=0,
        device=device))


def minibatch_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, feat: torch.Tensor,
                   labels: torch.Tensor, input_nodes: torch.Tensor, output_nodes: torch.Tensor,
                   blocks: list) -> float:
    """One training step on sampled blocks; returns the loss.

    Only the input nodes' features are gathered and only the seed nodes'
    labels enter the loss: everything else of the graph is untouched.
    """
    model.train()
    x = model_input(model, feat[input_nodes])
    logits = model(blocks, x)
    loss = F.cross_entropy(logits, labels[output_nodes])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return float(loss)


@dataclass(frozen=True)
class Batches:
    """How a minibatch loop batches an epoch: ``fanouts`` neighbours per layer, ``batch_size`` seed nodes per
    step (None: :data:`MINIBATCH_DEFAULTS`), at most ``max_per_epoch`` steps an epoch (None: all of them, a
    count to measure a few steps of a large graph).  ``loader`` replaces the neighbour sampler: called with the
    prepared graph and its training nodes (after seeding), it returns the epoch's minibatches
    ``(input_nodes, output_nodes, blocks)`` (``fanouts`` is then unused; see :mod:`gnnbook.ch5_minibatch.sampling`).

    Example:
        >>> Batches([5, 5], 32).batch_size, Batches().fanouts
        (32, (10, 10))
    """

    fanouts: Sequence[int] = (10, 10)
    batch_size: int | None = None
    max_per_epoch: int | None = None
    loader: Callable[[dgl.DGLGraph, torch.Tensor], Iterable] | None = None


def train_minibatch(graph: dgl.DGLGraph, model_name: str = "sage", optim: Optim | None = None,
                    batches: Batches | None = None, device: str = "cpu", progress: bool = True,
                    step: Callable[..., float] | None = None,
                    on_restored: Callable[[torch.nn.Module], Any] | None = None,
                    **model_options: Any) -> TrainResult:
    """Train ``model_name`` on sampled minibatches of ``graph``'s training nodes, with ``optim`` (None
    values: the model's :data:`gnnbook.training.train.TRAIN_DEFAULTS`, epochs and patience from
    :data:`MINIBATCH_DEFAULTS`), batched as ``batches`` says.

    Same record as :func:`gnnbook.training.train.train_node_classifier`: the weights of
    the epoch with the best validation accuracy are kept and their test
    accuracy reported; evaluation is full-neighbour inference on the whole
    graph.  ``seconds_per_epoch`` and ``peak_memory_bytes`` cover the training
    steps only (sampling, feature gather, forward, backward, update), which is
    what a minibatch system keeps small.  ``step`` replaces
    :func:`minibatch_step` (same arguments), e.g. a lab's own step; a minibatch
    without output nodes is skipped.  ``on_restored`` is called with the model once
    the best epoch's weights are back (a grader scores it on labels the run never saw).

    More than 8 parameters: ``model_options`` pass through to :func:`gnnbook.models.build_model` unchanged.

    Example:
        >>> from gnnbook.data import load_dataset
        >>> r = train_minibatch(load_dataset("cora"), "gcn", Optim(epochs=5), Batches([5, 5]))  # doctest: +SKIP
        >>> r.epochs_run                                                                        # doctest: +SKIP
        5
    """
    optim = (optim or Optim()).resolved(model_name, epochs=MINIBATCH_DEFAULTS["epochs"],
                                        patience=MINIBATCH_DEFAULTS["patience"])
    seed = optim.seed
    batches = batches or Batches()
    fanouts, loader, max_batches_per_epoch = batches.fanouts, batches.loader, batches.max_per_epoch
    batch_size = MINIBATCH_DEFAULTS["batch_size"] if batches.batch_size is None else batches.batch_size
    take_step = minibatch_step if step is None else step
    if loader is None:
        fanouts = check_fanouts(fanouts, model_layers(model_name, model_options))

    set_seed(seed)
    g = prepare_graph(graph).to(device)
    # The stored graph (all its sparse formats) is data, like the features:
    # build it now so that the first step's peak does not include it.
    g.create_formats_()
    feat, labels = g.ndata["feat"], g.ndata["label"]
    masks = {split: g.ndata[f"{split}_mask"] for split in ("train", "val", "test")}
    train_nodes = masks["train"].nonzero().squeeze(1)
    if len(train_nodes) == 0:
        raise ValueError("the graph has no training nodes (ndata['train_mask'] is all False)")
    model = build_model(model_name, feat.shape[1], int(labels.max()) + 1, **model_options).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=optim.lr, weight_decay=optim.weight_decay)
    batches = (neighbor_loader(g, train_nodes, fanouts, batch_size, shuffle=True, device=device)
               if loader is None else loader(g, train_nodes))
    x_full = model_input(model, feat)

    def evaluate() -> torch.Tensor:
        model.eval()
        with torch.no_grad():
            return model(g, x_full)

    best, history, train_seconds, peak_bytes = BestEpoch(optim.patience), [], 0.0, 0
    bar = tqdm(range(optim.epochs), desc=f"{model_name} minibatch seed {seed}", disable=not progress, leave=False)
    for epoch in bar:
        losses = []
        if device == "cpu":
            release_free_memory()  # start each epoch's peak from the live set
        with PeakMemory(device) as peak:
            start = time.perf_counter()
            for step, (input_nodes, output_nodes, blocks) in enumerate(batches):
                if max_batches_per_epoch is not None and step >= max_batches_per_epoch:
                    break
                if len(output_nodes) == 0:  # a sampled subgraph without training nodes has no loss
                    continue
                losses.append(take_step(model, optimizer, feat, labels, input_nodes, output_nodes, blocks))
            train_seconds += time.perf_counter() - start
        peak_bytes = max(peak_bytes, peak.peak_bytes)

        metrics = epoch_metrics(evaluate(), labels, masks)
        loss = float(np.mean(losses)) if losses else float("nan")
        history.append(dict(epoch=epoch, loss=loss, steps=len(losses), **metrics))
        # see gnnbook.training.train
        bar.set_postfix(loss=f"{loss:.3f}", val_acc=f"{metrics['val_acc']:.3f}", refresh=False)
        if best.update(model, epoch, metrics["val_acc"], metrics["val_loss"]):
            break
    best.restore(model)
    if on_restored is not None:
        on_restored(model)
    logits = evaluate()
    return TrainResult(
        model=model_name,
        seed=seed,
        test_acc=accuracy(logits[masks["test"]], labels[masks["test"]]),
        val_acc=best.val_acc,
        best_epoch=best.epoch,
        epochs_run=len(history),
        seconds_per_epoch=train_seconds / max(1, len(history)),
        peak_memory_bytes=peak_bytes,
        history=history,
    )


# --- what a minibatch depends on, and what must move -------------------------

def sample_minibatches(graph: dgl.DGLGraph, fanouts: Sequence[int], batch_size: int,
                       num_batches: int = 5, seed: int = 0, seed_nodes: torch.Tensor | None = None):
    """The first ``num_batches`` sampled minibatches ``(input_nodes, output_nodes,
    blocks)`` over ``seed_nodes`` (default: the training nodes), seeded."""
    set_seed(seed)
    if seed_nodes is None:
        seed_nodes = graph.ndata["train_mask"].nonzero().squeeze(1)
    batches = []
    for batch in neighbor_loader(graph, seed_nodes, fanouts, batch_size, shuffle=True):
        batches.append(batch)
        if len(batches) >= num_batches:
            break
    return batches


def dependency_counts(graph: dgl.DGLGraph, fanouts: Sequence[int], batch_size: int,
                      num_batches: int = 5, seed: int = 0,
                      seed_nodes: torch.Tensor | None = None) -> dict[str, float]:
    """How many nodes a minibatch depends on: the mean number of input nodes
    (first block's sources) and sampled edges per minibatch, and per seed node
    (seeds drawn from ``seed_nodes``, default the training nodes).  A DNN
    sample depends on itself only (1 per sample).

    Example:
        >>> from gnnbook.data import load_dataset
        >>> counts = dependency_counts(load_dataset("cora"), [10, 10], batch_size=32)  # doctest: +SKIP
        >>> counts["inputs_per_seed"] > 1                                           # doctest: +SKIP
        True
    """
    batches = sample_minibatches(graph, fanouts, batch_size, num_batches, seed, seed_nodes)
    inputs = [len(b[0]) for b in batches]
    seeds = [len(b[1]) for b in batches]
    edges = [sum(block.num_edges() for block in b[2]) for b in batches]
    return dict(layers=len(fanouts), batch_size=batch_size, input_nodes=float(np.mean(inputs)),
                sampled_edges=float(np.mean(edges)), inputs_per_seed=float(np.sum(inputs) / np.sum(seeds)))


def feature_fetch_counts(graph: dgl.DGLGraph, owner: torch.Tensor, fanouts: Sequence[int], batch_size: int,
                         rank: int = 0, num_batches: int = 5, seed: int = 0) -> dict[str, float]:
    """Per minibatch of machine ``rank`` (seeds: its own training nodes, as
    ``owner[v] == rank``), the mean number of input nodes, how many of them
    another machine owns, and the bytes of their features that must be
    fetched (float32 rows of ``ndata['feat']``).

    Example:
        >>> from gnnbook.data import load_dataset
        >>> g = load_dataset("cora")                                          # doctest: +SKIP
        >>> owner = torch.randint(0, 2, (g.num_nodes(),))                      # doctest: +SKIP
        >>> feature_fetch_counts(g, owner, [10, 10], 32)["remote_fraction"] > 0.3  # doctest: +SKIP
        True
    """
    owner = torch.as_tensor(owner)
    if owner.shape != (graph.num_nodes(),):
        raise ValueError(f"owner must give a part id per node ({graph.num_nodes()}), got shape {tuple(owner.shape)}")
    mine = (graph.ndata["train_mask"] & (owner == rank)).nonzero().squeeze(1)
    if len(mine) == 0:
        raise ValueError(f"part {rank} owns no training nodes; check owner")
    batches = sample_minibatches(graph, fanouts, batch_size, num_batches, seed, seed_nodes=mine)
    row_bytes = graph.ndata["feat"][0].numel() * graph.ndata["feat"].element_size()
    inputs = np.array([len(b[0]) for b in batches], dtype=float)
    remote = np.array([int((owner[b[0]] != rank).sum()) for b in batches], dtype=float)
    return dict(input_nodes=float(inputs.mean()), remote_input_nodes=float(remote.mean()),
                remote_fraction=float(remote.sum() / inputs.sum()), feature_bytes=float(inputs.mean() * row_bytes),
                remote_feature_bytes=float(remote.mean() * row_bytes))


def full_graph_boundary(graph: dgl.DGLGraph, owner: torch.Tensor, hidden: int, num_layers: int,
                        bytes_per_value: int = 4) -> dict[str, Any]:
    """What full-graph training on the parts given by ``owner`` (a part id per
    node) must exchange between machines.

    A part's *halo nodes* are the nodes of other parts with an edge into it:
    their values cross the boundary.  Their input features can be copied once
    (``feature_bytes_once``); every epoch, layers 2..L read the halo nodes'
    hidden embeddings forward and send the gradients of those embeddings back
    (``boundary_bytes_per_epoch`` = halo x hidden x bytes x 2 x (L - 1)).

    Example:
        >>> g = dgl.graph(([0, 1, 2], [1, 2, 3]))
        >>> g.ndata["feat"] = torch.zeros(4, 5)
        >>> full_graph_boundary(g, torch.tensor([0, 0, 1, 1]), hidden=8, num_layers=2)["halo_nodes"]
        1
    """
    owner = torch.as_tensor(owner)
    if owner.shape != (graph.num_nodes(),):
        raise ValueError(f"owner must give a part id per node ({graph.num_nodes()}), got shape {tuple(owner.shape)}")
    src, dst = graph.edges()
    per_part = []
    for part in range(int(owner.max()) + 1):
        crossing = (owner[dst] == part) & (owner[src] != part)
        per_part.append(int(torch.unique(src[crossing]).numel()))
    halo = sum(per_part)
    feat_dim = graph.ndata["feat"].shape[1]
    return dict(halo_nodes=halo, halo_nodes_per_part=per_part,
                edge_cut=float((owner[src] != owner[dst]).float().mean()),
                feature_bytes_once=halo * feat_dim * bytes_per_value,
                boundary_bytes_per_epoch=halo * hidden * bytes_per_value * 2 * (num_layers - 1))


def gradient_bytes(model: torch.nn.Module) -> int:
    """Bytes of one full gradient (what data-parallel training all-reduces per step)."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
