"""Run the whole course and report every claim it measured, in one table.

Book: 9.1 what the course measured.

Used in: chapters/09_outlook.ipynb.

Every notebook (``chapters/*.ipynb``, ``labs/*.ipynb``) is executed by
papermill with ``results_path`` set; the executed copy and its results JSON
stay in the output folder (``build/course/``).  Each notebook records its
claims with :class:`gnnbook.course.claims.Claims`; the rows are read back with
:func:`gnnbook.course.claims.read_claims` and printed as one table: notebook, claim,
paper, published number, measured number, holds or not, run time.  A
notebook that records no claims, or fails, gets a row that says so.

Example:
    $ python -m gnnbook course                       # every notebook
    $ python -m gnnbook course chapters/02_gnn_models.ipynb --out build/course
"""
from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .claims import NOT_HERE, read_claims, write_json_atomic

SUMMARY = "claims.json"
COLUMNS = ("notebook", "claim", "kind", "source", "published", "measured", "holds", "seconds")


@dataclass
class NotebookRun:
    """One notebook's run: where its outputs are, how long it took, what it claimed."""

    notebook: str
    executed: Path
    results: Path
    seconds: float
    error: str | None = None
    claims: list[dict[str, Any]] = field(default_factory=list)

    def rows(self) -> list[dict[str, Any]]:
        """The notebook's claim rows; one explanatory row when it failed or claimed nothing."""
        base = dict(notebook=self.notebook, seconds=round(self.seconds, 1))
        if self.error:
            return [dict(base, claim=f"notebook failed: {self.error}", kind="", source="", published="",
                         measured="", holds=False)]
        if not self.claims:
            return [dict(base, claim="(no claims recorded)", kind="",
                         source="", published="", measured="", holds=None)]
        return [dict(base, **{k: c.get(k, "") for k in ("claim", "kind", "source", "published", "measured", "holds")})
                for c in self.claims]


# chapter 9 collects every other notebook's claims (``out/claims.json``), so it runs after them all
RUNS_LAST = "09_outlook.ipynb"


def default_notebooks(root: Path) -> list[Path]:
    """Every chapter, then every lab, of the repository at ``root``; :data:`RUNS_LAST` at the end."""
    notebooks = sorted((root / "chapters").glob("*.ipynb")) + sorted((root / "labs").glob("*.ipynb"))
    return sorted(notebooks, key=lambda p: p.name == RUNS_LAST)      # stable: the others keep their order


CELL_TIMEOUT_S = 1800.0  # one cell of a scaled-up notebook (8b at 1M nodes: a few DistDGL jobs) takes minutes


class CellDeadline(RuntimeError):
    """A cell of a notebook ran past its deadline (the message names the notebook and the cell)."""


def execute_notebook(path: Path, executed: Path, parameters: dict[str, Any] | None = None,
                     cell_timeout_s: float = CELL_TIMEOUT_S) -> None:
    """Execute ``path`` with papermill into ``executed`` (in the notebook's folder), each cell under a
    deadline of ``cell_timeout_s``.  A failing cell raises papermill's ``PapermillExecutionError``; a cell
    past its deadline raises :class:`CellDeadline` naming the notebook, the cell's number and first line
    (papermill itself lets nbclient's timeout through with only a preview of the cell).

    Example:
        >>> execute_notebook(Path("chapters/01_introduction.ipynb"), Path("/tmp/01.ipynb"))  # doctest: +SKIP
    """
    import papermill
    from nbclient.exceptions import CellTimeoutError

    running: dict[str, Any] = {}

    def cell_started(cell: Any, cell_index: int) -> None:
        running.update(index=cell_index, source=cell.source)

    try:
        papermill.execute_notebook(str(path), str(executed), parameters=parameters or {}, cwd=str(Path(path).parent),
                                   kernel_name="python3", progress_bar=False, execution_timeout=cell_timeout_s,
                                   on_cell_start=cell_started)
    except CellTimeoutError:
        first = next((line.strip() for line in running.get("source", "").splitlines() if line.strip()), "")
        raise CellDeadline(f"{Path(path).name}: cell {running.get('index')} of the executed notebook ({first[:80]!r}) "
                           f"ran past its deadline of {cell_timeout_s:g} s and was stopped") from None


def run_notebook(path: Path, out: Path, parameters: dict[str, Any] | None = None,
                 timeout_s: float = CELL_TIMEOUT_S) -> NotebookRun:
    """Execute one notebook with papermill into ``out/<name>.ipynb``, results in ``out/<name>.json``;
    ``timeout_s`` is each cell's deadline (:func:`execute_notebook`)."""
    from papermill.exceptions import PapermillExecutionError

    path, out = Path(path).resolve(), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    executed, results = out / path.name, out / f"{path.stem}.json"
    results.unlink(missing_ok=True)          # never report a previous run's claims
    start = time.perf_counter()
    error = None
    try:
        execute_notebook(path, executed, {**(parameters or {}), "results_path": str(results.resolve())}, timeout_s)
    except PapermillExecutionError as exc:
        error = f"{exc.ename}: {exc.evalue}".strip()[:300]
    except CellDeadline as exc:
        error = str(exc)[:300]
    run = NotebookRun(path.stem, executed, results, time.perf_counter() - start, error)
    if results.exists():          # a notebook that writes nothing is reported as "no claims recorded"
        data = read_claims(results) if results.read_text().lstrip().startswith("{") else {}
        run.claims = data.get("claims", [])
    return run


def run_course(notebooks: list[Path], out: Path, **options: Any) -> list[NotebookRun]:
    """Run every notebook, one after the other, and write ``out/claims.json`` with all rows so far after
    each (so a notebook that reads it, chapter 9, sees those run before it, and not an older run's)."""
    runs = []
    for path in notebooks:
        print(f"running {path} ...", flush=True)
        run = run_notebook(path, out, **options)
        status = f"FAILED ({run.error})" if run.error else f"{len(run.claims)} claim(s)"
        print(f"  {run.seconds:.0f} s, {status}", flush=True)
        runs.append(run)
        write_json_atomic(Path(out) / SUMMARY, [row for run in runs for row in run.rows()])
    return runs


def claims_table(rows: list[dict[str, Any]], markdown: bool = False) -> str:
    """The course's claims as one text (or Markdown) table."""
    def mark(holds: Any) -> str:
        return "-" if holds is None else NOT_HERE if holds == NOT_HERE else ("yes" if holds else "NO")

    cells = [[str(r["notebook"]), str(r["claim"]), str(r.get("kind", "")), str(r["source"]), str(r["published"]),
              str(r["measured"]), mark(r["holds"]), f"{r['seconds']:.0f} s"] for r in rows]
    header = ["notebook", "claim", "kind", "source", "published", "measured", "holds", "run time"]
    if markdown:
        def escape(text: str) -> str:
            return text.replace("|", "\\|").replace("\n", " ")
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        return "\n".join(lines + ["| " + " | ".join(escape(c) for c in row) + " |" for row in cells])
    widths = [min(48, max(len(h), *(len(row[i]) for row in cells))) if cells else len(h)
              for i, h in enumerate(header)]

    def line(values: list[str]) -> str:
        return "  ".join(v[:w].ljust(w) for v, w in zip(values, widths)).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(row) for row in cells])


def report(runs: list[NotebookRun]) -> tuple[str, bool]:
    """The table and whether the course passed (every notebook ran and every claim held)."""
    rows = [row for run in runs for row in run.rows()]
    failed = [run.notebook for run in runs if run.error]
    broken = [f"{r['notebook']}: {r['claim']}" for r in rows if r["holds"] is False and r["notebook"] not in failed]
    untested = [r for r in rows if r["holds"] == NOT_HERE]
    lines = [claims_table(rows), ""]
    total = sum(run.seconds for run in runs)
    kinds = Counter(c.get("kind") or "?" for run in runs for c in run.claims)
    by_kind = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    lines.append(f"{len(runs)} notebook(s) in {total:.0f} s; {sum(len(r.claims) for r in runs)} claim(s)"
                 f"{f' ({by_kind})' if by_kind else ''}; "
                 f"{len(failed)} notebook(s) failed; {len(broken)} claim(s) do not hold"
                 + (f"; {len(untested)} cannot be tested on this machine (each row says why)" if untested else "")
                 + ".")
    for name in failed:
        lines.append(f"  failed: {name} (executed copy: {next(r.executed for r in runs if r.notebook == name)})")
    lines += [f"  does not hold: {b}" for b in broken]
    return "\n".join(lines), not failed and not broken


def gather_claims(root: Path, course_dir: Path, run_now: list[str],
                  out: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Every claim row the course has measured: those of the last ``make course`` (``course_dir/claims.json``,
    when it exists) and, for each notebook of ``run_now`` (paths relative to ``root``) it does not cover, a
    fresh papermill run into ``out``.  Returns the rows and the notebooks that were run now.

    Example:
        >>> rows, ran = gather_claims(ROOT, ROOT / "build/course", ["chapters/01_introduction.ipynb"],
        ...                           tmp)  # doctest: +SKIP
    """
    summary = Path(course_dir) / SUMMARY
    rows = [dict(r, source_run="make course") for r in json.loads(summary.read_text())] if summary.is_file() else []
    covered = {r["notebook"] for r in rows}
    ran = []
    for notebook in run_now:
        if Path(notebook).stem in covered:
            continue
        run = run_notebook(Path(root) / notebook, Path(out))
        rows += [dict(r, source_run="run now") for r in run.rows()]
        ran.append(notebook)
    return rows, ran
