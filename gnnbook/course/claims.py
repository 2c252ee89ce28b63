"""Every notebook's published-vs-measured claims, recorded one way for the whole course.

Book: none (the course's published-vs-measured record).

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

A notebook collects its claims in a :class:`Claims` table as it measures them,
shows the table at the end, and (when papermill gives it a ``results_path``)
writes it with its measured numbers as one JSON file.  ``make course`` and
chapter 9 read those files back and print one table for the whole course.

Only falsifiable comparisons are recorded: a measurement of this run against
something that could have disagreed with it.  Each row has a ``kind``:

- ``"paper"``: against a paper's number or statement; ``source`` is the paper's
  key in the repository's ``references.bib`` and where in it (``"kipf2017gcn,
  table 2"``).
- ``"model"``: against a prediction of the course's own model (a formula, a
  cost model, a simulator) that the code measured does not compute;
  ``source`` starts with ``"our model"`` (``"our model: gnnbook.comm.gloo_bytes"``)
  or is a bib key when the model is a paper's.
- ``"measurement"``: against another measurement of this run (one process
  against K processes, minibatch against full-graph); ``source`` starts with
  ``"our measurement"`` or is a bib key of the paper that states the relation.
- ``"target"``: against a lab's target (a teacher's choice, not a result);
  ``source`` starts with ``"lab target"``.

Invariants (a bound that holds by construction, a formula compared with itself,
bookkeeping of the code's own arguments, a theorem such as Belady's optimality)
cannot fail on a correct program: notebooks keep them as plain ``assert`` and do
not record them here.

A row also says what the source states (``published``), what this run measured
(``measured``) and whether the check in the notebook held (``holds``).  The check
itself stays an ``assert`` in the notebook, on the same condition that is passed
as ``holds``.

Some statements only hold on hardware this run may not have (a two-stage pipeline
needs a free core per stage).  When a measurement of this run shows the condition
was not met, :meth:`Claims.not_here` records the claim with ``holds`` =
:data:`NOT_HERE` and the measured reason, instead of asserting a weaker thing: the
claim is neither counted as holding nor as failing, and every table shows why.

Example:
    >>> claims = Claims("02_gnn_models")
    >>> ok = claims.add("GCN on Cora", kind="paper", source="kipf2017gcn, table 2",
    ...                 published="81.5%", measured="81.8% (5 seeds)", holds=True)
    >>> ok, claims.rows[0]["kind"], source_key(claims.rows[0]["source"])
    (True, 'paper', 'kipf2017gcn')
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

FIELDS = ("claim", "kind", "source", "published", "measured", "holds")
NOT_HERE = "not here"  # ``holds`` of a claim whose condition this run measured as unmet (Claims.not_here)
KINDS = ("paper", "model", "measurement", "target")
# sources that are not a paper: the course's own model, its own measurements, a lab's target
OWN_SOURCES = ("our model", "our measurement", "lab target")


def source_key(source: str) -> str | None:
    """The ``references.bib`` key a claim's source starts with (``"kipf2017gcn, table 2"``: ``"kipf2017gcn"``),
    or None for the course's own model, measurement or target, or a source that does not start with a key."""
    if source.startswith(OWN_SOURCES):
        return None
    key = re.match(r"[a-z]+(?:19|20)\d\d[a-z0-9]*(?=$|[\s,;(])", source)
    return key.group() if key else None


class Claims:
    """The claims of one notebook, in the order they were checked."""

    def __init__(self, notebook: str):
        self.notebook = notebook
        self.rows: list[dict[str, Any]] = []

    def add(self, claim: str, *, kind: str, source: str, published: str, measured: str, holds: bool) -> bool:
        """Record one claim; returns ``holds`` so that a notebook can write
        ``assert claims.add(..., holds=cond), message``."""
        self._check(kind, source)
        self.rows.append({"claim": claim, "kind": kind, "source": source, "published": str(published),
                          "measured": str(measured), "holds": bool(holds)})
        return bool(holds)

    def not_here(self, claim: str, *, kind: str, source: str, published: str, measured: str, because: str) -> None:
        """Record a claim that this run cannot test, ``because`` (a measured reason: "the stages shared the
        cores: other processes held 0.9 of 2"); its ``holds`` is :data:`NOT_HERE` and its ``measured``
        ends with the reason.  The notebook says so in its text as well."""
        self._check(kind, source)
        if not because.strip():
            raise ValueError("a claim that does not hold here needs its measured reason (because=...)")
        self.rows.append({"claim": claim, "kind": kind, "source": source, "published": str(published),
                          "measured": f"{measured}; does not hold here, because {because}", "holds": NOT_HERE})

    @staticmethod
    def _check(kind: str, source: str) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        if kind == "paper" and source_key(source) is None:
            raise ValueError(f"a paper claim's source starts with its references.bib key (then ', table N'), "
                             f"not {source!r}")
        if kind != "paper" and not source.startswith(OWN_SOURCES) and source_key(source) is None:
            raise ValueError(f"source {source!r}: a references.bib key, or one of {OWN_SOURCES}")

    def table(self):
        """The claims as a pandas DataFrame (one row per claim)."""
        import pandas as pd

        return pd.DataFrame(self.rows, columns=list(FIELDS))

    def write(self, results_path: str | os.PathLike | None, measured: dict[str, Any] | None = None) -> Path | None:
        """Write ``{"notebook", "claims", "measured"}`` to ``results_path`` as JSON,
        atomically (a temporary file renamed over the target, so a reader never
        sees half a file).  Nothing happens when ``results_path`` is None."""
        if results_path is None:
            return None
        return write_json_atomic(results_path, {"notebook": self.notebook, "claims": self.rows,
                                                "measured": measured or {}})


def write_json_atomic(path: str | os.PathLike, payload: Any) -> Path:
    """Write ``payload`` as JSON to ``path`` through a temporary file and a rename."""
    return write_text_atomic(path, json.dumps(payload, indent=2, default=_jsonable))


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file and a rename, so a
    reader sees the old file or the whole new one, never half of it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def read_claims(path: str | os.PathLike) -> dict[str, Any]:
    """Read one notebook's results file back; a file without claims gives an empty list."""
    data = json.loads(Path(path).read_text())
    data.setdefault("claims", [])
    return data


def _jsonable(value: Any) -> Any:
    # numpy and torch scalars, paths and sets, as JSON understands them
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)
