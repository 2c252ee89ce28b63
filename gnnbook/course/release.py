"""The labs' classroom release and autograding, driven by nbgrader.

Book: none (classroom release and autograding).

Used in: no notebook directly.

The labs carry no nbgrader metadata of their own: it is derived each time from
the two conventions of :mod:`gnnbook.course.conventions` (solution regions and
``# Check`` cells), so editing a lab never breaks its release.  A lab whose
grading module defines ``CHECKS`` is graded outside the student's kernel by
:mod:`gnnbook.course.grading.engine`; the others are executed by nbgrader.

nbgrader works on a course directory (``source/``, ``release/``,
``submitted/``, ``autograded/`` and a gradebook database); one is built in a
temporary folder for every command, and only the results leave it.

Example:
    >>> find_submissions(Path("/nonexistent"), [])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    gnnbook.course.conventions.ReleaseError: submissions folder /nonexistent does not exist; give ...
"""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sys
import tempfile
import warnings
from collections import defaultdict
from pathlib import Path

import nbformat

from .claims import write_text_atomic
from .conventions import (BEGIN_SOLUTION, CHECK_PREFIX, END_SOLUTION, POINTS_PER_CHECK, TASK_HEADING,  # noqa: F401
                          ReleaseError, annotate, is_annotated)

# One cell may take this long in the autograder (lab 8 starts a distributed job).
CELL_TIMEOUT_S = 900
GRADE_FIELDS = ("student", "lab", "task", "points", "max_points", "why")


def default_labs(root: Path) -> list[Path]:
    """The course's labs, ``labs/*.ipynb`` under the repository ``root``."""
    labs = sorted((root / "labs").glob("*.ipynb"))
    if not labs:
        raise ReleaseError(f"no lab notebooks in {root / 'labs'}")
    return labs


def release(labs: list[Path], out: Path) -> list[Path]:
    """Write the student version of every lab to ``out/<lab>.ipynb``; returns the paths.

    ``out`` is replaced as a whole once every lab is generated, so a failure
    leaves the previous release untouched.
    """
    out = Path(out)
    with tempfile.TemporaryDirectory(prefix="gnnbook-release-") as tmp:
        course = _Course(Path(tmp))
        staged = Path(tmp) / "staged"
        staged.mkdir()
        for lab in labs:
            shutil.copy(course.generate(lab), staged / lab.name)
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staged), str(out))
    return [out / lab.name for lab in labs]


def find_submissions(folder: Path, labs: list[Path]) -> list[tuple[str, Path]]:
    """``(student, notebook)`` pairs from ``folder/<student>/<lab>.ipynb``."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ReleaseError(f"submissions folder {folder} does not exist; give SUBMISSIONS=<folder> with one "
                           "sub-folder per student holding the lab notebooks (e.g. alice/lab02_message_passing.ipynb).")
    names = {lab.name for lab in labs}
    found, unknown = [], []
    for student in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for nb in sorted(student.glob("*.ipynb")):
            (found if nb.name in names else unknown).append((student.name, nb))
    if unknown:
        raise ReleaseError(f"these submissions are not labs of the course: {[str(p) for _, p in unknown]}; "
                           f"name each notebook as its lab: {sorted(names)}.")
    if not found:
        raise ReleaseError(f"no submissions in {folder}: expected {folder}/<student>/<lab>.ipynb, "
                           f"one sub-folder per student, notebooks named as the labs ({sorted(names)}).")
    return found


def autograde(submissions: Path, labs: list[Path], grades_csv: Path, autograded: Path | None = None,
              cell_timeout_s: float = CELL_TIMEOUT_S, jobs: int = 1, feedback: Path | None = None,
              check_deadline_s: float | None = None) -> list[dict]:
    """Grade every submitted lab and write one CSV row per student, lab and task.

    A lab whose grading module defines ``CHECKS`` (:mod:`gnnbook.course.grading.engine`) is graded
    outside the student's kernel: its solution cells are vetted and run, alone, in a sandboxed process,
    and the checks run in this one (``check_deadline_s``, by default ``cell_timeout_s``, is each check's
    deadline, and a submission stopped there gets no more checks); ``feedback`` gets
    ``<student>/<lab>.md``.  The other labs are executed by nbgrader, check cells restored from the
    teacher's lab; a check cell that raises, or runs past ``cell_timeout_s``, scores zero, and
    ``autograded`` keeps the executed notebooks.  Either way the row's ``why`` gives the first failed
    check of the task, a submission that fails in any way scores 0 with the reason while the others are
    graded, and the CSV is written.  ``jobs`` submissions are graded at a time.  Returns the rows, in the
    order of the submissions.
    """
    from .grading.engine import grade_class, grading_module

    if jobs < 1:
        raise ReleaseError(f"jobs must be at least 1, not {jobs}")
    pairs = find_submissions(Path(submissions), labs)
    by_name = {lab.name: lab for lab in labs}
    isolated = {lab.stem: lab for lab in labs if grading_module(lab.stem) is not None}
    graded: dict[tuple[str, Path], list[dict]] = {}
    try:
        here = [(s, nb) for s, nb in pairs if nb.stem in isolated]
        if here:
            try:
                graded |= grade_class(here, isolated, check_deadline_s or cell_timeout_s, feedback)
            except ValueError as exc:
                raise ReleaseError(str(exc)) from None
        with_nbgrader = [(s, nb) for s, nb in pairs if nb.stem not in isolated]
        if with_nbgrader:
            graded |= _autograde_with_nbgrader(with_nbgrader, by_name, autograded, cell_timeout_s, jobs)
    finally:
        rows = [row for pair in pairs for row in graded.get(pair, [])]
        _write_csv_atomic(Path(grades_csv), rows)
    return rows


def _autograde_with_nbgrader(pairs: list[tuple[str, Path]], by_name: dict[str, Path], autograded: Path | None,
                             cell_timeout_s: float, jobs: int) -> dict[tuple[str, Path], list[dict]]:
    from .labcheck import GRADING_ENV

    before = os.environ.get(GRADING_ENV)
    os.environ[GRADING_ENV] = "1"       # the kernels nbgrader starts inherit it (labcheck.graded_measurement)
    try:
        return _run_nbgrader(pairs, by_name, autograded, cell_timeout_s, jobs)
    finally:
        if before is None:
            os.environ.pop(GRADING_ENV, None)
        else:
            os.environ[GRADING_ENV] = before


def _run_nbgrader(pairs: list[tuple[str, Path]], by_name: dict[str, Path], autograded: Path | None,
                  cell_timeout_s: float, jobs: int) -> dict[tuple[str, Path], list[dict]]:
    with tempfile.TemporaryDirectory(prefix="gnnbook-autograde-") as tmp:
        course = _Course(Path(tmp) / "course", cell_timeout_s)
        course.root.mkdir()
        for name in sorted({nb.name for _, nb in pairs}):
            course.generate(by_name[name])
        if min(jobs, len(pairs)) == 1:
            graded = {(student, notebook): course.grade_or_zero(student, notebook) for student, notebook in pairs}
            roots = [course.root]
        else:
            roots = [Path(tmp) / f"worker{i}" for i in range(min(jobs, len(pairs)))]
            for root in roots:              # the generated assignments and gradebook, once per worker
                shutil.copytree(course.root, root)
            graded = _grade_in_workers(roots, course.max_points, cell_timeout_s, pairs, Path(tmp))
        if autograded is not None:
            if Path(autograded).exists():
                shutil.rmtree(autograded)
            Path(autograded).mkdir(parents=True)
            for root in roots:
                if (root / "autograded").exists():
                    shutil.copytree(root / "autograded", autograded, dirs_exist_ok=True)
    return graded


def _grade_in_workers(roots: list[Path], max_points: dict, cell_timeout_s: float,
                      pairs: list[tuple[str, Path]], tmp: Path) -> dict[tuple[str, Path], list[dict]]:
    """Grade ``pairs`` in a worker process per course copy (``python -m gnnbook.course.release``), under the
    course's process supervisor: a worker that fails stops them all, and nothing outlives the call.  Each
    worker takes the next submission nobody has taken yet, so a long one does not hold up a fixed share."""
    from ..base.procs import ProcessFailed, ProcessGroup

    # at most every code cell of every submission at its deadline, plus start-up: a bound, not an estimate
    cells = sum(sum(c.cell_type == "code" for c in nbformat.read(nb, as_version=4).cells) for _, nb in pairs)
    package_root = str(Path(__file__).resolve().parents[2])
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    # Each worker's kernels get their share of the cores: torch's OpenMP threads, as many as the cores in
    # every kernel, would oversubscribe them, and small graphs then run several times slower.
    threads = str(max(1, (os.cpu_count() or 1) // len(roots)))
    env |= {var: os.environ.get(var, threads) for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    (tmp / "taken").mkdir()
    outputs = []
    try:
        with ProcessGroup(deadline_s=cells * cell_timeout_s + 600, log_dir=tmp / "logs") as group:
            for i, root in enumerate(roots):
                spec, out = tmp / f"worker{i}.json", tmp / f"worker{i}-rows.json"
                spec.write_text(json.dumps(dict(root=str(root), max_points=max_points, cell_timeout_s=cell_timeout_s,
                                                taken=str(tmp / "taken"),
                                                pairs=[[student, str(nb)] for student, nb in pairs])))
                group.start(f"grader{i}", [sys.executable, "-m", "gnnbook.course.release", str(spec), str(out)], env)
                outputs.append(out)
            group.wait()
    except ProcessFailed as exc:
        raise ReleaseError(f"a grading worker failed: {exc}") from None
    graded = {}
    for out in outputs:
        for student, notebook, rows in json.loads(out.read_text()):
            graded[student, Path(notebook)] = rows
    return graded


def _take(taken: Path, index: int) -> bool:
    """Whether this worker is the first to take submission ``index`` (creating a file is atomic)."""
    try:
        os.close(os.open(taken / str(index), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def _grade_share(spec: Path, out: Path) -> None:
    """One worker of :func:`autograde`: grade, in its course copy, each pair of ``spec`` that no other
    worker took first; rows to ``out``."""
    job = json.loads(Path(spec).read_text())
    course = _Course(Path(job["root"]), job["cell_timeout_s"])
    course.max_points = job["max_points"]
    rows = [[student, notebook, course.grade_or_zero(student, Path(notebook))]
            for i, (student, notebook) in enumerate(job["pairs"]) if _take(Path(job["taken"]), i)]
    Path(out).write_text(json.dumps(rows))


def grades_summary(rows: list[dict]) -> str:
    """The grade rows as a text table, with each student's total per lab."""
    totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in rows:
        totals[r["student"], r["lab"]][0] += r["points"]
        totals[r["student"], r["lab"]][1] += r["max_points"]
    lines = [f"{'student':<16}{'lab':<28}{'task':<8}{'points':>8}  why"]
    for r in rows:
        lines.append(f"{r['student']:<16}{r['lab']:<28}{r['task']:<8}{r['points']:>5g}/{r['max_points']:g}"
                     f"  {r.get('why', '')}".rstrip())
    for (student, lab), (points, most) in totals.items():
        lines.append(f"{student:<16}{lab:<28}{'total':<8}{points:>5g}/{most:g}")
    return "\n".join(lines)


def failed_checks(executed: Path, cell_timeout_s: float = CELL_TIMEOUT_S) -> dict[str, str]:
    """Task -> "check id: error" for the first check of each task that failed in an executed
    notebook (the error's type and the first line of its message; nbgrader interrupts a cell
    that runs past the deadline, which reads as KeyboardInterrupt)."""
    why: dict[str, str] = {}
    for cell in nbformat.read(executed, as_version=4).cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        task = grade_id.split("-")[0]
        for output in cell.get("outputs", []) if "check" in grade_id and task not in why else []:
            if output.get("output_type") == "error":
                first = (output.get("evalue") or "").strip().splitlines()[:1]
                why[task] = f"{grade_id}: {output.get('ename')}" + (f": {first[0][:200]}" if first else "")
                if output.get("ename") == "NotGradedHere":
                    why[task] = f"{grade_id}: not graded here: {first[0][:200] if first else ''}"
                if output.get("ename") == "KeyboardInterrupt":
                    why[task] = (f"{grade_id}: stopped at the {cell_timeout_s:g} s deadline of a cell "
                                 "(a loop that never ends?)")
                break
    return why


class _Course:
    """An nbgrader course directory in ``root`` with one assignment per lab."""

    def __init__(self, root: Path, cell_timeout_s: float = CELL_TIMEOUT_S):
        from nbgrader.apps import NbGraderAPI
        from nbgrader.coursedir import CourseDirectory
        from traitlets.config import Config

        # nbgrader creates its gradebook by running the `alembic` command: the one installed
        # beside this interpreter, also when the venv is not activated (outside make).
        bin_dir = str(Path(sys.executable).parent)
        if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
        self.root, self.cell_timeout_s = root, cell_timeout_s
        self.max_points: dict[str, dict[str, float]] = {}
        config = Config()
        config.CourseDirectory.root = str(root)
        config.Execute.timeout = int(cell_timeout_s)
        self.config = config
        self.api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)

    def generate(self, lab: Path) -> Path:
        """Run ``generate_assignment`` on the annotated lab; returns the student version's path."""
        name = lab.stem
        source = self.root / "source" / name / lab.name
        source.parent.mkdir(parents=True, exist_ok=True)
        annotated = annotate(nbformat.read(lab, as_version=4), lab.name)
        nbformat.write(annotated, source)
        self.max_points[name] = defaultdict(float)
        for cell in annotated.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
            if "check" in grade_id:
                self.max_points[name][grade_id.split("-")[0]] += POINTS_PER_CHECK
        self._check(self.api.generate_assignment(name), f"generate_assignment {name}")
        return self.root / "release" / name / lab.name

    def grade_or_zero(self, student: str, notebook: Path) -> list[dict]:
        """:meth:`grade`, or zero for every task with the reason when nbgrader could not grade the
        submission (a cell that ignores the interrupt at its deadline, a broken notebook): the class goes on."""
        try:
            return self.grade(student, notebook)
        except Exception as exc:
            first = str(exc).strip().splitlines()[:1]
            return self._zero(student, notebook.stem, f"not graded: {type(exc).__name__}"
                                                      + (f": {first[0][:200]}" if first else ""))

    def _zero(self, student: str, name: str, why: str) -> list[dict]:
        return [dict(student=student, lab=name, task=task, points=0.0, max_points=most, why=why)
                for task, most in sorted(self.max_points[name].items(), key=lambda kv: int(kv[0][4:]))]

    def grade(self, student: str, notebook: Path) -> list[dict]:
        """Autograde one submission; returns its per-task rows."""
        from nbgrader.api import Gradebook

        name = notebook.stem
        nb = nbformat.read(notebook, as_version=4)
        if not is_annotated(nb):      # the teacher's own lab, solutions in place
            annotate(nb, str(notebook))
        target = self.root / "submitted" / student / name / notebook.name
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
        with warnings.catch_warnings():   # nbgrader's gradebook trips SQLAlchemy's autoflush warnings
            warnings.filterwarnings("ignore", message=".*not in session.*")
            result = self.api.autograde(name, student)
        if not result.get("success") and "DeadKernelError" in f"{result.get('log', '')}{result.get('error', '')}":
            # nbgrader keeps no grade of a notebook whose kernel died: zero for every task, and the next student
            return self._zero(student, name,
                              "the kernel died while the notebook ran (os._exit, a crash, or out of memory)")
        self._check(result, f"autograde {name} for {student}")
        per_task: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        with Gradebook(f"sqlite:///{self.root / 'gradebook.db'}") as gradebook:
            graded = gradebook.find_submission_notebook(name, name, student)
            for grade in graded.grades:
                task = grade.name.split("-")[0]
                per_task[task][0] += grade.score or 0.0
                per_task[task][1] += grade.max_score
        why = failed_checks(self.root / "autograded" / student / name / notebook.name, self.cell_timeout_s)
        return [dict(student=student, lab=name, task=task, points=points, max_points=most, why=why.get(task, ""))
                for task, (points, most) in sorted(per_task.items(), key=lambda kv: int(kv[0][4:]))]

    @staticmethod
    def _check(result: dict, what: str) -> None:
        if not result.get("success"):
            raise ReleaseError(f"nbgrader {what} failed:\n{result.get('log', '')}\n{result.get('error', '')}")


def _write_csv_atomic(path: Path, rows: list[dict]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=GRADE_FIELDS)
    writer.writeheader()
    writer.writerows(rows)
    write_text_atomic(path, buffer.getvalue())


if __name__ == "__main__":      # a worker of autograde(jobs > 1): python -m gnnbook.course.release SPEC OUT
    _grade_share(Path(sys.argv[1]), Path(sys.argv[2]))
