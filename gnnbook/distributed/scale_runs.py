"""One graph on 1, 2, 3, 4 emulated machines, each held to the same memory budget.

Book: 1.2.1 why GNN training gets large; 8.3.4 cluster training (a graph bigger than one
machine's memory, split across machines).

Used in: chapters/08b_beyond_one_machine.ipynb.

Each run partitions the ``scale`` graph (:func:`gnnbook.data.scale_arrays`) into K parts
(cached), starts K emulated machines (a server and a trainer each) under one memory budget
per machine (:class:`~gnnbook.base.budget.MemoryBudget`), and records every machine's
measured peak, or the machine that went over.  Beside the measurement stands what its server
loads, the partition's files (:func:`part_bytes`, halo included).  A machine's peak is about a
multiple of those bytes plus what the processes themselves take (interpreters, DGL, torch),
which a graph of a few hundred MB does not dwarf (:class:`MemoryModel` fits both, with the
structure file's bytes apart from the node data's: a halo grows the structure only); the table
shows the files and the peaks.  :func:`held_share` computes a part's share from its counts
instead, which misses what DGL stores per halo node.

Example:
    >>> rows = machine_runs(dict(num_nodes=300_000), [1, 2], ["metis"], "1.1GiB")  # doctest: +SKIP
    >>> [r.fits for r in rows]  # doctest: +SKIP
    [False, True]
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..base.budget import format_gib, parse_bytes
from .cluster import LocalCluster
from .config import TrainConfig
from .launcher import JobFailed
from .partition_files import OpenedPartition, PartitionReport, load_partition
from .partition_cache import open_cached_partition


@dataclass
class MachineRun:
    """One K-machine run: what the partition predicts and what each machine's budget measured."""

    machines: int
    method: str
    budget_bytes: int
    graph_bytes: int  # as the partition counts them (graph_bytes)
    part_bytes: list[int]  # each machine's partition files (part_bytes): what its server loads
    structure_bytes: list[int]  # the structure file among them (structure_bytes): the rest is node data
    peaks: list[int] = field(default_factory=list)  # measured, per machine
    failure: str | None = None  # the first line of the job's failure: a machine over budget
    seconds_per_epoch: float | None = None
    test_acc: float | None = None
    steps_per_trainer: int | None = None  # per epoch, the busiest trainer's
    remote_bytes: int | None = None  # feature bytes one trainer fetched from other machines per epoch (the most)

    @property
    def fits(self) -> bool:
        return self.failure is None and all(p <= self.budget_bytes for p in self.peaks)

    def line(self) -> str:
        peaks = " ".join(format_gib(p) for p in self.peaks) or "-"
        parts = " ".join(f"{b / 2**20:.0f}" for b in self.part_bytes)
        outcome = (f"trains: {self.seconds_per_epoch:.1f} s/epoch, test acc {self.test_acc:.3f}" if self.fits
                   else f"fails: {self.failure}")
        return f"{self.machines:>2} {self.method:<7} {parts:<24} {peaks:<32} {outcome}"


def _node_row_bytes(num_features: int) -> int:
    return 4 * num_features + 11  # float32 features, an int64 label and three boolean masks


def graph_bytes(report: PartitionReport, num_features: int) -> int:
    """The whole graph's bytes as :func:`held_share` counts them: every node's row and id, every edge."""
    return report.num_nodes * (_node_row_bytes(num_features) + 8) + 16 * report.num_edges


def held_share(report: PartitionReport, num_features: int) -> list[float]:
    """Per machine, the fraction of the graph's bytes its partition holds: the features (float32)
    and node data of its inner nodes, the ids of its inner and halo nodes, and its edges (int64
    pairs; every edge into an inner node is stored there, halo sources included).  The ideal is
    1/K; the halo is what a partition adds to it (more for random partitioning than for METIS)."""
    row, total = _node_row_bytes(num_features), graph_bytes(report, num_features)
    return [(p.inner_nodes * row + 8 * (p.inner_nodes + p.halo_nodes) + 16 * p.inner_edges) / total
            for p in report.parts]


def part_bytes(partition: OpenedPartition) -> list[int]:
    """Each part's files on disk: its structure (inner and halo nodes, every edge into an inner node,
    DGL's id maps) and its inner nodes' data.  This is what a machine's graph server loads, so it is
    measured, halo included, rather than computed from the counts as :func:`held_share` is."""
    return [sum(partition.part_file(i, key).stat().st_size for key in ("part_graph", "node_feats", "edge_feats")
                if partition.config[f"part-{i}"].get(key))
            for i in range(partition.num_parts)]


def structure_bytes(partition: OpenedPartition) -> list[int]:
    """Each part's structure file (inner and halo nodes, edges, DGL's id maps): the share of
    :func:`part_bytes` that a halo grows.  The rest is its inner nodes' data (features, labels)."""
    return [partition.part_file(i, "part_graph").stat().st_size for i in range(partition.num_parts)]


@dataclass(frozen=True)
class MemoryModel:
    """A machine's peak = ``fixed`` (its processes: interpreters, torch, DGL, a minibatch) + its
    node data as loaded (one byte per byte on disk, not fitted) + ``per_structure_byte`` x its
    structure file (DGL builds formats and id maps from it, so a byte there costs more).  Fitted
    by least squares on the machines of runs that trained (:meth:`fit`), then asked about
    partitions it has not seen.  A random partition's larger halo grows the structure file, not
    the node data: fitting on runs with both methods separates the two costs.

    Example:
        >>> model = MemoryModel(fixed=600e6, per_structure_byte=1.5)
        >>> round(model.predict(part_bytes=150e6, structure_bytes=100e6) / 1e6)  # 600 + 50 + 1.5 x 100
        800
    """

    fixed: float
    per_structure_byte: float

    @classmethod
    def fit(cls, runs: list[MachineRun]) -> "MemoryModel":
        points = [(s, p - (b - s)) for r in runs if r.fits for b, s, p in zip(r.part_bytes, r.structure_bytes, r.peaks)]
        if len({s for s, _ in points}) < 2:
            raise ValueError("fitting the memory model needs machines with at least two structure sizes "
                             "(runs on two machine counts, or two methods, that trained)")
        slope, intercept = np.polyfit(*zip(*points), 1)
        return cls(fixed=float(intercept), per_structure_byte=float(slope))

    def predict(self, part_bytes: float, structure_bytes: float) -> float:
        return self.fixed + (part_bytes - structure_bytes) + self.per_structure_byte * structure_bytes


def machine_runs(graph_options: dict[str, Any], machine_counts: list[int], methods: list[str],
                 machine_memory: int | str, epochs: int = 1, batch_size: int = 256,
                 eval_fanouts: tuple[int, int] = (25, 25), deadline_s: float = 1800.0) -> list[MachineRun]:
    """Train the scale graph of ``graph_options`` on each of ``machine_counts`` machines (one
    trainer each) with each partitioning method; every machine under ``machine_memory``.
    Evaluation samples ``eval_fanouts`` neighbours: the full 2-hop neighbourhood of a batch reaches
    the hubs (at 1M nodes it doubled a machine's peak, to 1.6 GiB at K = 4)."""
    budget = parse_bytes(machine_memory)
    rows, whole_done = [], False
    for method in methods:
        for k in machine_counts:
            # One part is the whole graph whatever the method: one 1-machine run serves every method.
            if k == 1 and whole_done:
                continue
            whole_done |= k == 1
            partition = open_cached_partition("scale", k, method if k > 1 else "random", **graph_options)
            report = load_partition(partition)
            num_features = partition.config["gnnbook"]["num_features"]
            row = MachineRun(k, method if k > 1 else "whole", budget, graph_bytes(report, num_features),
                             part_bytes(partition), structure_bytes(partition))
            with LocalCluster(partition, num_trainers=1, machine_memory=budget, deadline_s=deadline_s) as cluster:
                try:
                    result = cluster.train(TrainConfig(epochs=epochs, batch_size=batch_size,
                                                       eval_fanouts=list(eval_fanouts)))
                    row.seconds_per_epoch, row.test_acc = result["seconds_per_epoch"], result["test_acc"]
                    per_epoch = result["per_epoch"]
                    row.steps_per_trainer = max(per_epoch["steps"][0])
                    row.remote_bytes = max(per_epoch["remote_bytes"][0])
                except JobFailed as err:
                    row.failure = str(err).split("\n")[0]
                row.peaks = [r.peak_bytes for r in cluster.started[-1].reports]
            rows.append(row)
    return rows


def table(rows: list[MachineRun]) -> str:
    """The runs as plain text, one line each, under a header naming the budget."""
    head = (f"budget {format_gib(rows[0].budget_bytes)} per machine; graph {format_gib(rows[0].graph_bytes)}\n"
            " K method  partition files (MiB)    measured peak per machine        outcome")
    return "\n".join([head, *(r.line() for r in rows)])
