"""Small display helpers the notebooks share: source listings, tables, plot style.

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
