"""Choosing a training method from the graph, the model and the hardware (book section 7.7).

Book: 7.7 comparing and choosing.

Used in: chapters/07_gnn_systems.ipynb, chapters/09_outlook.ipynb.

Section 7.7 compares GNN systems along three axes: the hardware (7.7.1), the training method
(7.7.2: full-graph or minibatch) and the update strategy (7.7.3: synchronous or asynchronous).
This module turns the first two into a rule of thumb with its numbers shown, on top of
:mod:`gnnbook.graph.sizing`:

1. **single-device full-graph** when the graph, the features, the weights with their optimizer
   state and the full-graph activations fit one device (the setting of GCN's own paper);
2. **minibatch with caching** on one machine when the graph and features fit its host memory and
   one sampled minibatch fits a device; the rest of the device holds a feature cache
   (PaGraph, SoCC 2020; GNNLab, EuroSys 2022);
3. across machines, **distributed full-graph** (ROC, DistGNN, NeutronStar) when each worker's
   partition of the full-graph state fits its device, or **distributed minibatch** (DistDGL,
   AliGraph, ByteGNN) when each machine's partition of graph and features fits its host memory;
   when both fit, the one that moves fewer bytes per epoch over the link (a stated cost model:
   halo exchange of hidden vectors per layer vs remote feature rows of sampled inputs).

Memory is in decimal bytes; ``HEADROOM`` of each memory is usable (the rest: framework,
allocator fragmentation, the operating system).  Everything here is an estimate to be checked
against a measurement (chapter 1 checks :mod:`gnnbook.graph.sizing` on a small case).

Example:
    >>> cora = Workload(num_nodes=2708, num_edges=10556, feat_dim=1433, num_classes=7, hidden=16)
    >>> laptop = Hardware(machines=1, devices_per_machine=0, device_memory=8e9, host_memory=8e9)
    >>> choose(cora, laptop).method
    'single-device full-graph'
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..graph.neighbourhood import sampling_bound
from ..graph.sizing import (activation_bytes, embedding_table_bytes, format_bytes, gcn_training_activation_bytes,
                            training_state_bytes)

__all__ = ["METHODS", "MODELS", "HEADROOM", "Workload", "Hardware", "Recommendation", "memory_needs", "choose"]

METHODS = ("single-device full-graph", "minibatch with caching", "distributed full-graph", "distributed minibatch")
MODELS = ("gcn", "gat", "sage")
HEADROOM = 0.8  # usable fraction of a device's or a host's memory
INDEX_BYTES = 8  # int64 node ids in CSR, as DGL and PyG store them


@dataclass(frozen=True)
class Workload:
    """The graph and the model: sizes, not data."""

    num_nodes: int
    num_edges: int  # directed edges, as stored (an undirected edge counts twice)
    feat_dim: int
    num_classes: int = 10
    model: str = "gcn"
    hidden: int = 256  # per head for GAT
    num_layers: int = 2
    heads: int = 1
    batch_size: int = 1024  # seed nodes per minibatch
    fanouts: tuple[int, ...] = (25, 10)  # one per layer
    train_fraction: float = 0.1  # share of nodes with training labels (seeds per epoch)
    optimizer: str = "adam"
    halo_factor: float = 1.5  # assumed (local + halo) / local nodes of a good partition; measure it (chapter 8)

    def __post_init__(self):
        if self.model not in MODELS:
            raise ValueError(f"unknown model {self.model!r}; choose one of {MODELS}")
        for name in ("num_nodes", "num_edges", "feat_dim", "num_classes", "hidden", "num_layers", "heads",
                     "batch_size"):
            if getattr(self, name) < (0 if name == "num_edges" else 1):
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if len(self.fanouts) != self.num_layers:
            raise ValueError(f"fanouts {self.fanouts} must have one entry per layer ({self.num_layers})")
        if not 0 < self.train_fraction <= 1:
            raise ValueError(f"train_fraction must be in (0, 1], got {self.train_fraction}")
        if self.halo_factor < 1:
            raise ValueError(f"halo_factor must be >= 1, got {self.halo_factor}")


@dataclass(frozen=True)
class Hardware:
    """Machines, each with ``devices_per_machine`` accelerators (0: train on the CPU, whose
    memory is the host memory) and a network link of ``link_gbps`` gigabits per second."""

    machines: int = 1
    devices_per_machine: int = 1
    device_memory: float = 16e9  # bytes per device
    host_memory: float = 64e9  # bytes per machine
    link_gbps: float = 10.0

    def __post_init__(self):
        if self.machines < 1 or self.devices_per_machine < 0:
            raise ValueError(f"need machines >= 1 and devices_per_machine >= 0, "
                             f"got {self.machines}, {self.devices_per_machine}")
        if min(self.device_memory, self.host_memory, self.link_gbps) <= 0:
            raise ValueError("device_memory, host_memory and link_gbps must be positive")

    @property
    def usable_device(self) -> float:
        return HEADROOM * (self.device_memory if self.devices_per_machine else self.host_memory)

    @property
    def workers(self) -> int:
        return self.machines * max(self.devices_per_machine, 1)


@dataclass
class Recommendation:
    method: str  # one of METHODS, or "does not fit"
    reason: str
    needs: dict[str, int]  # bytes, from memory_needs
    options: list[dict] = field(default_factory=list)  # every method: bytes per host and device, fits?, link

    def table(self):
        """The options as a pandas DataFrame (bytes written out), the chosen one first."""
        import pandas as pd

        frame = pd.DataFrame(self.options).set_index("method")
        for col in ("host_needed", "host_usable", "device_needed", "device_usable", "link_bytes"):
            frame[col] = frame[col].map(format_bytes)
        return frame.round({"link_s_per_epoch": 1})


def _param_bytes(w: Workload) -> int:
    widths = [w.feat_dim] + [w.hidden * w.heads] * (w.num_layers - 1) + [w.num_classes]
    # SAGE: self + neighbour weights
    per_layer = [(a * (2 if w.model == "sage" else 1) + 1) * b for a, b in zip(widths, widths[1:])]
    if w.model == "gat":
        per_layer = [p + 2 * b for p, b in zip(per_layer, widths[1:])]  # attention vectors
    return 4 * sum(per_layer)


def _activations(w: Workload, nodes: int, edges: int) -> int:
    if w.model == "gcn":
        return gcn_training_activation_bytes(nodes, w.feat_dim, w.hidden, w.num_classes, w.num_layers)["total"]
    # textbook count x 3: what autograd saves per layer (output, dropout mask, next input), as for GCN
    return activation_bytes(nodes, w.hidden * w.heads, w.num_layers, tensors_per_layer=3,
                            num_edges=edges if w.model == "gat" else 0, heads=w.heads)


def memory_needs(w: Workload) -> dict[str, int]:
    """Bytes of each part of training, full-graph and per minibatch.

    Example:
        >>> needs = memory_needs(Workload(num_nodes=1000, num_edges=10_000, feat_dim=100))
        >>> needs["features"]
        400000
    """
    structure = INDEX_BYTES * (w.num_nodes + 1 + w.num_edges)  # CSR
    features = embedding_table_bytes(w.num_nodes, w.feat_dim)
    params = training_state_bytes(_param_bytes(w), w.optimizer)["total"]
    hops = sampling_bound(w.batch_size, list(w.fanouts), w.num_nodes)
    input_nodes = hops[-1]
    sampled_edges = min(w.num_edges, sum(n * f for n, f in zip(hops, w.fanouts)))
    mb_features = embedding_table_bytes(input_nodes, w.feat_dim)
    mb_device = mb_features + 2 * INDEX_BYTES * sampled_edges + _activations(w, input_nodes, sampled_edges) + params
    full = structure + features + params + _activations(w, w.num_nodes, w.num_edges)
    return {"structure": structure, "features": features, "params_and_optimizer": params,
            "full_graph_activations": full - structure - features - params, "full_graph_total": full,
            "minibatch_input_nodes": input_nodes, "minibatch_features": mb_features, "minibatch_device": mb_device}


def _link_seconds(num_bytes: float, hw: Hardware) -> float:
    return num_bytes * 8 / (hw.link_gbps * 1e9)


def choose(w: Workload, hw: Hardware) -> Recommendation:
    """The first method, in the order of the module docstring, whose memory fits, with the numbers.

    Example:
        >>> big = Workload(num_nodes=10**8, num_edges=10**9, feat_dim=128, num_layers=3, fanouts=(15, 10, 5))
        >>> choose(big, Hardware(machines=8, device_memory=16e9, host_memory=64e9)).method
        'distributed minibatch'
    """
    needs = memory_needs(w)
    graph_and_feats = needs["structure"] + needs["features"]
    host = HEADROOM * hw.host_memory
    seeds = math.ceil(w.train_fraction * w.num_nodes)
    remote = 1 - 1 / hw.machines
    # per epoch over the link: minibatch pulls remote feature rows of every minibatch's inputs;
    # full-graph exchanges halo rows of every layer's hidden vectors, forward and backward
    mb_bytes = math.ceil(seeds / w.batch_size) * needs["minibatch_input_nodes"] * remote * w.feat_dim * 4
    halo_nodes = (w.halo_factor - 1) * w.num_nodes if hw.machines > 1 else 0
    fg_bytes = 2 * w.num_layers * halo_nodes * w.hidden * w.heads * 4
    host_share = graph_and_feats * w.halo_factor / hw.machines
    rows = [  # method, bytes per host, bytes per device, possible on this hardware, link bytes per epoch
        (METHODS[0], graph_and_feats, needs["full_graph_total"], True, 0),
        (METHODS[1], graph_and_feats, needs["minibatch_device"], True, 0),
        (METHODS[2], host_share, needs["full_graph_total"] * w.halo_factor / hw.workers, hw.workers > 1, fg_bytes),
        (METHODS[3], host_share, needs["minibatch_device"], hw.machines > 1, mb_bytes),
    ]
    options = [dict(method=m, host_needed=h, host_usable=host, device_needed=d, device_usable=hw.usable_device,
                    fits=bool(possible and h <= host and d <= hw.usable_device), link_bytes=b,
                    link_s_per_epoch=_link_seconds(b, hw)) for m, h, d, possible, b in rows]
    cache_fraction = min(1.0, max(0.0, hw.usable_device - needs["minibatch_device"]) / needs["features"])
    fits = [o for o in options if o["fits"]]
    if not fits:
        return Recommendation("does not fit", "no method fits this hardware: add machines or memory, "
                              "or shrink the model (hidden, layers, fanouts)", needs, options)
    if fits[0]["method"] in METHODS[:2]:
        best = fits[0]
    else:  # both distributed methods may fit: the one that moves fewer bytes per epoch
        best = min(fits, key=lambda o: o["link_bytes"])
    reasons = {
        METHODS[0]: f"everything ({format_bytes(needs['full_graph_total'])}) fits one device "
                    f"({format_bytes(hw.usable_device)} usable)",
        METHODS[1]: f"graph and features ({format_bytes(graph_and_feats)}) fit one host "
                    f"({format_bytes(host)} usable) and a minibatch "
                    f"({format_bytes(needs['minibatch_device'])}) fits a device; "
                    f"the full graph ({format_bytes(needs['full_graph_total'])}) does not; the rest of a device "
                    f"caches {cache_fraction:.0%} of the feature rows",
        METHODS[2]: f"each of {hw.workers} workers holds its partition of the full-graph state "
                    f"({format_bytes(best['device_needed'])}), and the halo exchange moves "
                    f"~{format_bytes(fg_bytes)} per epoch",
        METHODS[3]: f"one host cannot hold graph and features ({format_bytes(graph_and_feats)}); "
                    f"{hw.machines} machines can, and minibatches move "
                    f"~{format_bytes(mb_bytes)} of remote features per epoch",
    }
    options.sort(key=lambda o: o is not best)
    return Recommendation(best["method"], reasons[best["method"]], needs, options)

