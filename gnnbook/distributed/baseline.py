"""The single-process comparison: minibatch training of the same model with
the same fanouts, seed, epochs and global batch size, on the whole graph
rebuilt from a partition config, with plain DGL sampling (no servers).

Book: 8.3 distributed training (the one-process comparison).

Used in: chapters/08_dgl_practice.ipynb, labs/lab08_distributed_dgl.ipynb.

It selects the epoch by validation accuracy and evaluates with all
neighbours, as the distributed trainer does, so the two test accuracies are
comparable.

Example:
    >>> result = train_single_process("cora.json", TrainConfig(epochs=20), num_trainers=2)  # doctest: +SKIP
    >>> 0.7 < result["test_acc"] < 0.85                                                   # doctest: +SKIP
    True
"""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import dgl
import torch
import torch.nn.functional as F
from dgl.data.utils import load_tensors

from ..base.seeding import sampling_on_one_thread, set_seed
from ..training.train import accuracy, best_epoch_row
from .config import TrainConfig, make_model, node_data_keys
from .partition_files import OpenedPartition, open_partition


def whole_graph(part_config: str | Path | OpenedPartition) -> dgl.DGLGraph:
    """The graph all partitions of ``part_config`` hold together (in the
    partitioned node order), with every node feature DGL stored.  Each part's
    graph and node-data files are read directly (the config is opened once,
    by :func:`~gnnbook.distributed.partition_files.open_partition`, without
    checking the files' digests, as DGL's own loader does not).

    Example:
        >>> whole_graph("cora-2/cora.json").num_nodes()  # doctest: +SKIP
        2708
    """
    partition = open_partition(part_config, verify=False, node_data=False)
    src, dst, feats = [], [], {}
    for i in range(partition.num_parts):
        g = dgl.load_graphs(str(partition.part_file(i, "part_graph")))[0][0]
        node_feats = load_tensors(str(partition.part_file(i, "node_feats")))
        nid = g.ndata[dgl.NID]
        u, v = g.edges()
        inner = g.edata["inner_edge"].bool()
        src.append(nid[u[inner]])
        dst.append(nid[v[inner]])
        for key, value in node_feats.items():
            feats.setdefault(key.split("/")[-1], []).append(value)
    num_nodes = sum(len(v) for v in next(iter(feats.values())))
    graph = dgl.graph((torch.cat(src), torch.cat(dst)), num_nodes=num_nodes)
    for key, parts in feats.items():
        graph.ndata[key] = torch.cat(parts)  # partitions own consecutive id ranges, in order
    return graph


def train_single_process(part_config: str | Path | OpenedPartition | dgl.DGLGraph, config: TrainConfig,
                         num_trainers: int = 1, threads: int | None = 1) -> dict[str, Any]:
    """Train in this process on the whole graph of ``part_config`` (or on a graph
    :func:`whole_graph` built, so that several seeds share one) with global batch ``config.batch_size * num_trainers``
    (pass the job's total trainer count, so both take the same steps per epoch);
    return accuracy and time per epoch.  ``threads``: torch threads while
    training (1, as each launched trainer has; more threads than cores
    slow a shared 2-core machine down ~10x).  Sampling runs on one thread
    whatever ``threads`` is, so a run repeats exactly."""
    previous = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        with sampling_on_one_thread():  # DGL 2.1 samples reproducibly only on one thread
            return _train(part_config, config, num_trainers)
    finally:
        torch.set_num_threads(previous)


def train_single_process_seeds(part_config: str | Path | OpenedPartition, config: TrainConfig, seeds: int,
                               num_trainers: int = 1) -> list[dict[str, Any]]:
    """:func:`train_single_process` with seeds ``config.seed`` .. ``config.seed + seeds - 1``,
    all on one whole graph, built once (training leaves the graph as it was).

    Example:
        >>> runs = train_single_process_seeds("cora.json", TrainConfig(epochs=20), 5, num_trainers=2)  # doctest: +SKIP
        >>> len(runs)                                                                                   # doctest: +SKIP
        5
    """
    graph = whole_graph(part_config)
    return [train_single_process(graph, replace(config, seed=config.seed + k), num_trainers=num_trainers)
            for k in range(seeds)]


def _train(part_config: str | Path | OpenedPartition | dgl.DGLGraph, config: TrainConfig,
           num_trainers: int) -> dict[str, Any]:
    graph = part_config if isinstance(part_config, dgl.DGLGraph) else whole_graph(part_config)
    feat_key, label_key = node_data_keys(list(graph.ndata.keys()), config.feat_name, config.label_name)
    feat, label = graph.ndata[feat_key], graph.ndata[label_key].long()
    nids = {s: torch.nonzero(graph.ndata[f"{s}_mask"]).flatten() for s in ("train", "val", "test")}
    model = make_model(config, feat.shape[1], int(label.max()) + 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    sampler = dgl.dataloading.NeighborSampler(config.fanouts)
    history = []
    for epoch in range(config.epochs):
        set_seed(config.seed * 1_000_003 + epoch * 1009)
        loader = dgl.dataloading.DataLoader(graph, nids["train"], sampler, batch_size=config.batch_size * num_trainers,
                                            shuffle=True, drop_last=False)
        model.train()
        start, steps = time.perf_counter(), 0
        for input_nodes, seeds, blocks in loader:
            loss = F.cross_entropy(model(blocks, feat[input_nodes]), label[seeds])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            steps += 1
        seconds = time.perf_counter() - start
        model.eval()
        with torch.no_grad():
            logits = model(graph, feat)  # all neighbours, the whole graph at once
        history.append(dict(epoch=epoch, seconds=seconds, steps=steps,
                            val_acc=accuracy(logits[nids["val"]], label[nids["val"]]),
                            test_acc=accuracy(logits[nids["test"]], label[nids["test"]])))
    best = best_epoch_row(history)
    return dict(mode="single-process", test_acc=best["test_acc"], val_acc=best["val_acc"], best_epoch=best["epoch"],
                final_test_acc=history[-1]["test_acc"], steps_per_epoch=history[0]["steps"],
                seconds_per_epoch=sum(h["seconds"] for h in history) / len(history), history=history)
