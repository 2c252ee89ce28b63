"""Small display helpers the notebooks share: source listings, tables, plot style.

Book: none (display helpers).

Used in: chapters/01_introduction.ipynb, chapters/02_gnn_models.ipynb, chapters/03_distributed_ml.ipynb,
chapters/04_gnn_training.ipynb, chapters/05a_minibatch_training_and_sampling.ipynb,
chapters/05b_feature_caching.ipynb, chapters/05c_execution_engine.ipynb, chapters/05d_communication.ipynb,
chapters/05e_sampler_accuracy.ipynb, chapters/05f_distributed_cache.ipynb,
chapters/05g_historical_embeddings.ipynb, chapters/06a_fullgraph_parallelism.ipynb,
chapters/06b_operator_parallelism.ipynb, chapters/06c_sync_and_async_protocols.ipynb,
chapters/07_gnn_systems.ipynb, chapters/08_dgl_practice.ipynb, chapters/08b_beyond_one_machine.ipynb,
chapters/09_outlook.ipynb, labs/lab02_message_passing.ipynb, labs/lab03_collectives.ipynb,
labs/lab04_minibatch.ipynb, labs/lab05_feature_cache.ipynb, labs/lab05b_historical_embeddings.ipynb,
labs/lab06_halo_exchange.ipynb, labs/lab08_distributed_dgl.ipynb, labs/lab10_recommendation.ipynb,
labs/lab11_spatiotemporal_index_batching.ipynb, labs/lab12_feature_loading.ipynb.

Example:
    >>> from gnnbook.models import GCN
    >>> "class GCN" in source_of(GCN)
    True
"""
from __future__ import annotations

import inspect
from typing import Any, Iterable


def source_of(obj: Any) -> str:
    return inspect.getsource(obj)


def show_source(obj: Any) -> Any:
    """Display the source of a gnnbook function or class, highlighted, so a
    notebook shows the package's implementation instead of a second copy."""
    from IPython.display import Code, display

    code = Code(source_of(obj), language="python")
    display(code)
    return None


def table(rows: Iterable[dict[str, Any]], index: str | None = None):
    """A pandas DataFrame from a list of records (rendered as a table in Jupyter)."""
    import pandas as pd

    frame = pd.DataFrame(list(rows))
    return frame.set_index(index) if index else frame


def use_style() -> None:
    """One plot style for the whole course: readable on a projector."""
    import matplotlib.pyplot as plt

    plt.rcParams.update({
        "figure.figsize": (6.4, 3.6), "figure.dpi": 100, "axes.grid": True, "grid.alpha": 0.3,
        "axes.spines.top": False, "axes.spines.right": False, "font.size": 11,
    })


STAGE_COLOURS = {"sample": "tab:blue", "fetch": "tab:orange", "wait": "tab:grey", "compute": "tab:green"}


def plot_timelines(runs: dict[str, Any], ax=None):
    """Per-step timelines of one epoch per loop (``{"serial": run, "pipelined": run}``,
    :class:`gnnbook.ch5_minibatch.pipelining.LoopRun` each),
    one lane per process: the sampler process's sample and fetch, the
    trainer's wait and compute.  Returns the matplotlib axes.

    Example:
        >>> ax = plot_timelines({"serial": serial_run, "pipelined": pipelined_run})  # doctest: +SKIP
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    if ax is None:
        ax = plt.subplots(figsize=(10, 1.2 + 0.8 * len(runs)))[1]
    lanes = []
    for name, run in runs.items():
        separate = any(s.get("wait") for s in run.timeline)  # the pipelined loop has a producer process
        rows = ([(f"{name}: sampler process", ("sample", "fetch")), (f"{name}: trainer", ("wait", "compute"))]
                if separate else [(f"{name}: trainer", ("sample", "fetch", "compute"))])
        for label, stages in rows:
            y = len(lanes)
            for stage in stages:
                spans = [(s[stage][0], s[stage][1] - s[stage][0]) for s in run.timeline if s.get(stage)]
                ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=STAGE_COLOURS[stage], edgecolor="white",
                               linewidth=0.3)
            lanes.append(label)
    ax.set_yticks(range(len(lanes)), lanes)
    ax.invert_yaxis()
    ax.set_xlabel("seconds from the start of the epoch")
    ax.legend(handles=[Patch(color=c, label=s) for s, c in STAGE_COLOURS.items()], ncol=4, loc="upper center",
              bbox_to_anchor=(0.5, -0.35), frameon=False)
    return ax
