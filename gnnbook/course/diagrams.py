"""Concept figures the notebooks draw from code: the forms of parallelism, DistDGL's processes, push and
pull, the halo, the cache hierarchy and a sampled minibatch's blocks.

Book: 3.2-3.3 (forms of parallelism), 4.1 and 5.3 (blocks), 5.2.2 (push and pull), 5.4 (caches),
6.1.1 (halo exchange), 8.3 (DistDGL's processes).

Used in: chapters/03_distributed_ml.ipynb, chapters/05b_feature_caching.ipynb,
chapters/05c_execution_engine.ipynb, chapters/05f_distributed_cache.ipynb,
chapters/06a_fullgraph_parallelism.ipynb, chapters/08_dgl_practice.ipynb, labs/lab04_minibatch.ipynb,
labs/lab06_halo_exchange.ipynb, labs/lab08_distributed_dgl.ipynb.

They are matplotlib figures rather than pictures so that they are versioned as code, follow the
parameters a reader changes, and are tested: where a figure shows something that can be computed (a
pipeline's bubble, a partition's halo nodes, a minibatch's blocks), it computes it and returns the
numbers with the figure.

Example:
    >>> fig, bubble = pipeline_schedule(stages=4, microbatches=8)
    >>> round(bubble, 3)                      # (p - 1) / (m + p - 1)
    0.273
"""
from __future__ import annotations

from typing import Any, Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

__all__ = ["parallelism_forms", "pipeline_schedule", "distdgl_processes", "push_and_pull", "halo_exchange",
           "cache_hierarchy", "minibatch_blocks"]

COLOURS = plt.get_cmap("tab10").colors


def _box(ax, x: float, y: float, w: float, h: float, text: str = "", colour: Any = "white", **text_kw) -> Rectangle:
    box = Rectangle((x, y), w, h, facecolor=colour, edgecolor="black", linewidth=1)
    ax.add_patch(box)
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=text_kw.pop("fontsize", 9), **text_kw)
    return box


def _arrow(ax, start: tuple[float, float], end: tuple[float, float], style: str = "-|>", **kw) -> FancyArrowPatch:
    arrow = FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=10, linewidth=1, **kw)
    ax.add_patch(arrow)
    return arrow


def _blank(ax, title: str, xlim=(0, 10), ylim=(0, 10)) -> None:
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_axis_off()
    ax.set_title(title, fontsize=10)


def pipeline_schedule(stages: int = 4, microbatches: int = 8, ax=None) -> tuple[Figure, float]:
    """The forward passes of a GPipe-style pipeline (book 3.3.3): ``stages`` workers, ``microbatches``
    per minibatch; returns the figure and the idle share of the grid, which is (p - 1) / (m + p - 1)."""
    if stages < 1 or microbatches < 1:
        raise ValueError(f"a pipeline needs at least one stage and one microbatch, got {stages} and {microbatches}")
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(6.4, 0.5 + 0.45 * stages))
    steps = microbatches + stages - 1
    busy = 0
    for stage in range(stages):
        for mb in range(microbatches):    # microbatch mb reaches stage s at step s + mb
            _box(ax, stage + mb, stages - 1 - stage, 1, 1, str(mb + 1), COLOURS[mb % 10], fontsize=8)
            busy += 1
    bubble = 1 - busy / (steps * stages)
    ax.set_xlim(0, steps)
    ax.set_ylim(0, stages)
    ax.set_yticks([stages - 0.5 - s for s in range(stages)], [f"stage {s + 1}" for s in range(stages)])
    ax.set_xlabel("time step (one microbatch through one stage)")
    ax.grid(False)
    ax.set_title(f"pipeline: {stages} stages x {microbatches} microbatches, idle share {bubble:.2f}", fontsize=10)
    return fig, bubble


def parallelism_forms() -> Figure:
    """Data, model (tensor) and pipeline parallelism side by side (book 3.2-3.3): who holds which
    weights and which data, and what crosses between workers."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    ax = axes[0]
    _blank(ax, "data parallel: a whole model per worker")
    for w in range(3):
        x = 0.4 + 3.2 * w
        _box(ax, x, 5.5, 2.6, 2.2, f"model\ncopy {w + 1}", COLOURS[0], fontsize=8)
        _box(ax, x, 8.2, 2.6, 1.2, f"shard {w + 1}", COLOURS[2], fontsize=8)
        _arrow(ax, (x + 1.3, 5.5), (x + 1.3, 3.6))
    _box(ax, 0.4, 2.2, 9.2, 1.4, "all-reduce of the gradients\n(same weights after every step)", COLOURS[1], fontsize=8)
    ax = axes[1]
    _blank(ax, "model (tensor) parallel: one layer split")
    _box(ax, 0.4, 8.2, 9.2, 1.2, "the whole minibatch on every worker", COLOURS[2], fontsize=8)
    for w in range(3):
        x = 0.4 + 3.2 * w
        _box(ax, x, 4.6, 2.6, 3.0, f"columns\n{w + 1}/3 of W", COLOURS[0], fontsize=8)
        _arrow(ax, (x + 1.3, 4.6), (x + 1.3, 3.6))
    _box(ax, 0.4, 2.2, 9.2, 1.4, "all-gather of the partial outputs\n(every layer)", COLOURS[1], fontsize=8)
    pipeline_schedule(stages=3, microbatches=4, ax=axes[2])
    axes[2].set_title("pipeline parallel: layers split into stages", fontsize=10)
    fig.tight_layout()
    return fig


def distdgl_processes(num_machines: int = 2, trainers_per_machine: int = 2, samplers_per_trainer: int = 0) -> Figure:
    """DistDGL's processes on ``num_machines`` machines (book 8.3; what ``gnnbook dist-train`` starts):
    per machine one graph server holding its partition and its slice of the key-value store, the trainers
    (reading their own machine's rows through shared memory, other machines' over RPC) and their sampler
    processes; the trainers all-reduce gradients with torch.distributed."""
    if num_machines < 1 or trainers_per_machine < 1 or samplers_per_trainer < 0:
        raise ValueError("a job needs at least one machine and one trainer per machine")
    width = 4.2
    fig, ax = plt.subplots(figsize=(1.0 + 3.2 * num_machines, 4.2))
    _blank(ax, f"DistDGL: {num_machines} machines x {trainers_per_machine} trainers"
               + (f" x {samplers_per_trainer} samplers" if samplers_per_trainer else ""),
           xlim=(0, 0.4 + (width + 0.4) * num_machines), ylim=(0, 10))
    trainer_w = (width - 0.4 - 0.2 * (trainers_per_machine - 1)) / trainers_per_machine
    for m in range(num_machines):
        x0 = 0.4 + (width + 0.4) * m
        ax.add_patch(Rectangle((x0, 1.6), width, 7.9, facecolor="none", edgecolor="grey", linestyle="--"))
        ax.text(x0 + 0.1, 9.2, f"machine {m}", fontsize=9, color="grey")
        _box(ax, x0 + 0.2, 6.9, width - 0.4, 1.9, f"graph server {m}\npartition {m} + KV store slice", COLOURS[1])
        for t in range(trainers_per_machine):
            tx = x0 + 0.2 + t * (trainer_w + 0.2)
            _box(ax, tx, 3.9, trainer_w, 1.5, f"trainer\n{m * trainers_per_machine + t}", COLOURS[0])
            _arrow(ax, (tx + trainer_w / 2, 5.4), (tx + trainer_w / 2, 6.9), style="<|-|>", color="black")
            for s in range(samplers_per_trainer):
                sw = trainer_w / samplers_per_trainer
                _box(ax, tx + s * sw, 2.6, sw, 0.9, "sampler", COLOURS[2], fontsize=7)
        if m + 1 < num_machines:        # a remote read: this machine's trainer asks the next machine's server
            nx = x0 + width + 0.4
            _arrow(ax, (x0 + width - 0.2, 4.9), (nx + 0.3, 7.4), color=COLOURS[3], linestyle=":")
    ax.text(0.4, 0.9, "solid: shared memory within a machine   dotted: RPC to another machine's server", fontsize=8)
    ax.text(0.4, 0.2, "all trainers: gradient all-reduce (torch.distributed, gloo) every step", fontsize=8)
    return fig


def push_and_pull(layers: int = 2) -> Figure:
    """Book 5.2.2: machine B needs node u, which machine A owns.  Push sends u's embedding at every
    layer; pull copies u's inputs once and recomputes u on B."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.2))
    for ax, mode in zip(axes, ("push", "pull")):
        _blank(ax, f"{mode}: " + ("A sends h_u at every layer" if mode == "push" else
                                  "B copies u's inputs once, computes h_u itself"))
        _box(ax, 0.3, 1.0, 3.6, 8.0, "", "#eeeeee")
        _box(ax, 6.1, 1.0, 3.6, 8.0, "", "#eeeeee")
        ax.text(2.1, 8.4, "machine A (owns u)", ha="center", fontsize=9)
        ax.text(7.9, 8.4, "machine B (owns v)", ha="center", fontsize=9)
        step = 5.4 / max(layers, 1)
        for layer in range(layers + 1):
            y = 1.5 + layer * step
            _box(ax, 1.3, y, 1.6, 0.9, f"h_u^{layer}", COLOURS[0], fontsize=8)
            _box(ax, 7.1, y, 1.6, 0.9, f"h_v^{layer}", COLOURS[1], fontsize=8)
            if mode == "push" and layer < layers:    # h_u^l is an input of h_v^(l+1)
                _arrow(ax, (2.9, y + 0.45), (7.1, y + step + 0.45), color=COLOURS[3])
        if mode == "pull":
            _box(ax, 4.2, 2.6, 1.6, 1.4, "copy of\nu's inputs", COLOURS[2], fontsize=8)
            _arrow(ax, (2.9, 1.95), (4.2, 3.3), color=COLOURS[3])
            _arrow(ax, (5.8, 3.3), (7.1, 4.0), color="black")
    fig.tight_layout()
    return fig


def halo_exchange(num_parts: int = 2) -> tuple[Figure, list[dict[str, int]]]:
    """Book 6.1.1 on Zachary's karate club, split into ``num_parts`` parts (2: the club's own split):
    each part computes its owned nodes and needs its halo, the other parts' nodes with an edge into it,
    which a halo exchange sends before every layer.  Returns the figure and, per part, its owned nodes,
    halo nodes and cut edges."""
    import networkx as nx

    graph = nx.karate_club_graph()
    if num_parts == 2:
        owner = {n: int(graph.nodes[n]["club"] != "Mr. Hi") for n in graph}
    elif num_parts >= 1:
        owner = {n: n * num_parts // graph.number_of_nodes() for n in graph}
    else:
        raise ValueError(f"num_parts must be at least 1, got {num_parts}")
    layout = nx.spring_layout(graph, seed=0)
    fig, axes = plt.subplots(1, num_parts, figsize=(4.6 * num_parts, 4.0), squeeze=False)
    counts = []
    for part, ax in enumerate(axes[0]):
        owned = [n for n in graph if owner[n] == part]
        halo = sorted({u for n in owned for u in graph[n] if owner[u] != part})
        local_edges = [(a, b) for a, b in graph.edges if owner[a] == part or owner[b] == part]
        cut = [(a, b) for a, b in local_edges if owner[a] != owner[b]]
        nx.draw_networkx_edges(graph, layout, edgelist=[e for e in graph.edges if e not in local_edges],
                               ax=ax, edge_color="#dddddd")
        nx.draw_networkx_edges(graph, layout, edgelist=[e for e in local_edges if e not in cut], ax=ax)
        nx.draw_networkx_edges(graph, layout, edgelist=cut, ax=ax, edge_color=COLOURS[3], style="dashed")
        nx.draw_networkx_nodes(graph, layout, nodelist=owned, node_color=[COLOURS[part]], node_size=90, ax=ax)
        nx.draw_networkx_nodes(graph, layout, nodelist=halo, node_color="white",
                               edgecolors=[COLOURS[owner[n]] for n in halo], linewidths=2, node_size=90, ax=ax)
        ax.set_title(f"part {part}: {len(owned)} owned, {len(halo)} halo (hollow), {len(cut)} cut edges", fontsize=9)
        ax.set_axis_off()
        counts.append(dict(part=part, owned=len(owned), halo=len(halo), cut_edges=len(cut)))
    fig.tight_layout()
    return fig, counts


def cache_hierarchy(levels: Sequence[tuple[str, str, str]] | None = None) -> Figure:
    """Book 5.4: where a feature row can come from, fastest and smallest first.  The default bandwidths are
    orders of magnitude of common hardware (HBM, PCIe 4.0 x16, 10 GbE), not measurements of this machine."""
    levels = levels or [("GPU memory: the feature cache (hot rows)", "~1 TB/s", "GBs"),
                        ("host memory: this machine's partition", "~25 GB/s over PCIe", "100s of GB"),
                        ("other machines: the rest of the graph", "~1 GB/s over the network", "the whole graph")]
    fig, ax = plt.subplots(figsize=(7.5, 0.6 + 1.0 * len(levels)))
    _blank(ax, "where a minibatch's feature rows come from (5.4): a hit stops at the first level that holds it",
           ylim=(0, len(levels)))
    for i, (what, speed, size) in enumerate(levels):
        y = len(levels) - 1 - i
        inset = 1.2 * (len(levels) - 1 - i)
        _box(ax, inset / 2 + 0.2, y + 0.1, 9.6 - inset, 0.8, f"{what}\n{speed}, {size}", COLOURS[i % 10], alpha=0.9)
    return fig


def minibatch_blocks(blocks: Sequence[Any], max_nodes: int = 40) -> tuple[Figure, list[int]]:
    """A sampled minibatch as DGL's blocks (book 4.1, 5.3): one column of nodes per layer, from the input
    nodes (left) to the seeds (right), with every sampled edge.  Returns the figure and the number of nodes
    per column (input nodes first).  Meant for a small batch: at most ``max_nodes`` per column are drawn."""
    import dgl

    columns = [blocks[0].srcdata[dgl.NID].tolist()] + [b.dstdata[dgl.NID].tolist() for b in blocks]
    fig, ax = plt.subplots(figsize=(2.2 + 2.0 * len(columns), 4.2))
    ax.set_axis_off()
    position = []
    for c, nodes in enumerate(columns):
        shown = nodes[:max_nodes]
        ys = {n: 1 - (i + 0.5) / max(len(shown), 1) for i, n in enumerate(shown)}
        position.append(ys)
        ax.scatter([c] * len(shown), list(ys.values()), s=25, color=COLOURS[c % 10], zorder=3)
        label = "input nodes" if c == 0 else ("seeds" if c == len(columns) - 1 else f"layer {c} outputs")
        ax.text(c, 1.04, f"{label}\n{len(nodes)}", ha="center", fontsize=9)
    for layer, block in enumerate(blocks):
        src, dst = block.edges()
        src_ids, dst_ids = columns[layer], columns[layer + 1]
        for s, d in zip(src.tolist(), dst.tolist()):
            a, b = position[layer].get(src_ids[s]), position[layer + 1].get(dst_ids[d])
            if a is not None and b is not None:
                ax.plot([layer, layer + 1], [a, b], color="grey", linewidth=0.6, zorder=1)
    ax.set_xlim(-0.5, len(columns) - 0.5)
    ax.set_ylim(-0.05, 1.15)
    return fig, [len(nodes) for nodes in columns]
