"""Grade one submitted lab outside the student's kernel: vet the solution cells, run only them, sandboxed, and
check from here.

Book: none (autograding).

Used in: no notebook directly (``gnnbook.course.release.autograde`` grades the labs that have ``CHECKS``).

For a lab whose grading module (``gnnbook.course.grading.<lab>``) defines ``CHECKS``, ``POLICY`` and
``PRELUDE``, :func:`grade_submission`:

1. takes the submission's solution cells, found by the teacher's grade ids (every other cell of the
   notebook, a student's added cells included, is never run);
2. vets each task's cells (:func:`gnnbook.course.vetting.vet`): a refused construct scores the task 0
   and names the line, in the grade table and the feedback, whether or not its checks would pass;
3. runs every check of the lab *in this process* (the grader, which never runs student code) against a
   :class:`~gnnbook.course.grading.student.Sandboxed` student: the prelude and the accepted solution
   cells, in one sandboxed process per submission that serves its checks one after another (a fresh one
   after a check whose process failed; :mod:`gnnbook.course.sandbox`);
4. scores one point per passed check and writes the feedback: every check, passed or with its message.

Example:
    >>> import nbformat
    >>> nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
    ...     "x = 1", metadata={"nbgrader": {"grade_id": "task1-solution1"}})])
    >>> solution_cells(nb, ["task1-solution1"])
    [('task1-solution1', 'x = 1')]
"""
from __future__ import annotations

import importlib
import os
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import nbformat

from ...base.cpu_share import CpuShare
from ..conventions import annotate, as_released
from ..sandbox import sandbox_warning
from ..vetting import vet
from .student import CELL_MARK, Sandboxed, StudentCodeError


@dataclass(frozen=True)
class Check:
    """One graded check of a lab: ``task`` it scores (one point), what it verifies, and the function
    ``run(student, thorough) -> measurements`` that raises AssertionError when it fails."""

    task: int
    name: str
    run: Callable[..., dict[str, Any]]


def grading_module(lab: str) -> ModuleType | None:
    """The lab's grading module when the lab is graded outside the student's kernel (it defines ``CHECKS``),
    else None."""
    try:
        module = importlib.import_module(f"{__package__}.{lab}")
    except ModuleNotFoundError:
        return None
    return module if hasattr(module, "CHECKS") else None


def solution_cells(nb: nbformat.NotebookNode, grade_ids: list[str]) -> list[tuple[str, str]]:
    """``(grade id, source)`` of the notebook's cells that carry the teacher's solution grade ids, in the
    teacher's order (the first cell with each id; a missing one is empty)."""
    found: dict[str, str] = {}
    for cell in nb.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
        if cell.get("cell_type") == "code" and grade_id in grade_ids and grade_id not in found:
            found[grade_id] = cell.source
    return [(grade_id, found.get(grade_id, "")) for grade_id in grade_ids]


def _task(grade_id: str) -> int:
    return int(grade_id.split("-")[0][4:])


def grade_submission(student: str, lab: str, notebook: Path, teacher_ids: list[str], workdir: Path,
                     deadline_s: float, threads: int = 1, released: dict[str, str] | None = None
                     ) -> tuple[list[dict], str]:
    """Grade one submission of ``lab``; returns its grade rows (one per task) and its feedback (Markdown).
    Never raises for what the submission does: a failure is a task's zero with the reason.  ``released``
    (grade id -> the solution cell as released): a submission whose every solution cell is as released is
    not attempted, and no process is started for it."""
    module = grading_module(lab)
    checks: tuple[Check, ...] = module.CHECKS
    try:
        nb = nbformat.read(notebook, as_version=4)
        if not any("nbgrader" in cell.metadata for cell in nb.cells):   # the teacher's own lab
            annotate(nb, notebook.name)
        cells = solution_cells(nb, teacher_ids)
    except Exception as error:      # an unreadable notebook: every task 0
        cells, no_process = [], f"the notebook could not be read ({type(error).__name__}: {error})"
    else:
        no_process = ""
    tasks = sorted({c.task for c in checks})
    refused: dict[int, str] = {}
    accepted: list[str] = []
    for grade_id, source in cells:
        found = vet(source, module.POLICY)
        if found:
            refused.setdefault(_task(grade_id), f"{grade_id}, {found[0]}"
                               + (f" (and {len(found) - 1} more)" if len(found) > 1 else ""))
        else:
            accepted.append(f"{CELL_MARK}{grade_id}\n{source}\n")
    if released and cells and all(source.strip() == released.get(grade_id, "").strip() for grade_id, source in cells):
        no_process = "not attempted: every solution cell is as the release gave it"
    sandboxed = Sandboxed(module.PRELUDE, "".join(accepted), workdir, deadline_s, threads)
    try:
        results = _run_checks(checks, sandboxed, no_process, refused, deadline_s)
    finally:
        sandboxed.close()
    rows = []
    for task in tasks:
        of_task = [r for r in results if r[0].task == task]
        points = 0.0 if task in refused else float(sum(passed for _, passed, _, _ in of_task))
        first_failed = next((message for _, passed, message, _ in of_task if not passed), "")
        why = f"refused: {refused[task]}" if task in refused else first_failed
        rows.append(dict(student=student, lab=lab, task=f"task{task}", points=points, max_points=float(len(of_task)),
                         why=why[:400]))
    return rows, _feedback(student, lab, rows, results, refused)


def _run_checks(checks: tuple[Check, ...], sandboxed: Sandboxed, no_process: str, refused: dict[int, str],
                deadline_s: float) -> list[tuple[Check, bool, str, float]]:
    """Every check against the student's process (none when ``no_process`` gives the reason every check fails):
    (check, passed, message, seconds)."""
    results: list[tuple[Check, bool, str, float]] = []
    stopped = ""        # after a check's process is killed at the deadline, the submission's time is spent
    for check in checks:
        if no_process or check.task in refused or stopped:
            results.append((check, False, no_process or stopped or f"refused: {refused[check.task]}", 0.0))
            continue
        start = time.monotonic()
        try:
            measured = check.run(sandboxed, thorough=True)
            results.append((check, True, _summary(measured), time.monotonic() - start))
        except StudentCodeError as error:
            results.append((check, False, str(error), time.monotonic() - start))
            if error.deadline:
                stopped = f"not run: an earlier check of this submission was stopped at the {deadline_s:g} s deadline"
        except AssertionError as error:
            results.append((check, False, str(error) or "an assertion failed", time.monotonic() - start))
        except Exception as error:      # the check itself met something it did not expect in the replies
            last = traceback.extract_tb(error.__traceback__)[-1]
            results.append((check, False, f"{type(error).__name__}: {error} (in the check, line {last.lineno}: "
                                          f"the replies of your code were not what it asked for)",
                            time.monotonic() - start))
    return results


def _summary(measured: dict[str, Any]) -> str:
    shown = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in measured.items()
             if isinstance(v, (int, float, str))}
    return ", ".join(f"{k} = {v}" for k, v in shown.items())


def _feedback(student: str, lab: str, rows: list[dict], results: list, refused: dict[int, str]) -> str:
    lines = [f"# {lab}: feedback for {student}", ""]
    for row in rows:
        task = int(row["task"][4:])
        lines += [f"## Task {task}: {row['points']:g} / {row['max_points']:g}", ""]
        if task in refused:
            lines += [f"- **Refused construct** (the task scores 0): {refused[task]}", ""]
        for check, passed, message, seconds in (r for r in results if r[0].task == task):
            mark = "passed" if passed else "FAILED"
            lines.append(f"- {mark}: {check.name} ({seconds:.1f} s)" + (f"\n  - {message}" if message else ""))
        lines.append("")
    return "\n".join(lines)


def released_solutions(lab: Path) -> dict[str, str]:
    """The teacher's lab's solution cells as the release gives them: grade id -> source."""
    annotated = annotate(nbformat.read(lab, as_version=4), lab.name)
    return {c.metadata.nbgrader["grade_id"]: as_released(c.source) for c in annotated.cells
            if "solution" in c.metadata.get("nbgrader", {}).get("grade_id", "")}


def teacher_grade_ids(lab: Path) -> tuple[list[str], dict[int, int]]:
    """The teacher's lab's solution grade ids, in order, and its number of check cells per task; raises
    ValueError when the grading module's checks do not match the notebook's check cells."""
    annotated = annotate(nbformat.read(lab, as_version=4), lab.name)
    ids = [c.metadata.nbgrader["grade_id"] for c in annotated.cells if "nbgrader" in c.metadata]
    cells_per_task = dict(Counter(_task(grade_id) for grade_id in ids if "check" in grade_id))
    checks_per_task = dict(Counter(check.task for check in grading_module(lab.stem).CHECKS))
    if checks_per_task != cells_per_task:
        raise ValueError(f"{lab.name}: the notebook has check cells per task {cells_per_task}, its grading module "
                         f"{checks_per_task}: one check cell per Check of {__package__}.{lab.stem}.CHECKS")
    return [i for i in ids if "solution" in i], cells_per_task


def free_threads(sample_s: float = 0.2) -> int:
    """The cores that no other process held over the last ``sample_s`` seconds (at least 1): the threads a
    student's process gets.  More threads than free cores is no small loss: torch's OpenMP threads wait for
    each other at every operation, and a thread whose core another program holds makes the others wait
    (lab 4 took 320 s beside one busy process with two threads, 22 s on a quiet machine)."""
    if (os.cpu_count() or 1) == 1:
        return 1
    with CpuShare([os.getpid()]) as share:
        time.sleep(sample_s)
    return max(1, int(share.free_cores + 0.5))


def grade_class(pairs: list[tuple[str, Path]], labs: dict[str, Path], deadline_s: float,
                feedback: Path | None = None) -> dict[tuple[str, Path], list[dict]]:
    """Grade every ``(student, notebook)`` of labs graded here, one after another; writes
    ``feedback/<student>/<lab>.md`` when given."""
    ids = {name: teacher_grade_ids(labs[name])[0] for name in {nb.stem for _, nb in pairs}}
    released = {name: released_solutions(labs[name]) for name in ids}
    warning = sandbox_warning()
    if warning:
        print(warning, file=sys.stderr)
    # One submission at a time, each check's process on every free core: a pool of grader processes
    # (multiprocessing) leaves its resource tracker behind for the caller's life, and threads would share the
    # global generators the checks seed (a grade would then depend on what was graded beside it).  The
    # student's processes start in a second or two; their checks are what takes the time.
    with tempfile.TemporaryDirectory(prefix="gnnbook-grade-") as tmp:
        graded = [grade_submission(student, notebook.stem, notebook, ids[notebook.stem], Path(tmp) / f"s{i}",
                                   deadline_s, free_threads(), released[notebook.stem])
                  for i, (student, notebook) in enumerate(pairs)]
    out = {}
    for (student, notebook), (rows, text) in zip(pairs, graded):
        out[student, notebook] = rows
        if feedback is not None:
            path = Path(feedback) / student / f"{notebook.stem}.md"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    return out
