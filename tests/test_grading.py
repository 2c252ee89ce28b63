"""The labs' grades can only be earned: for every lab, `autograde` (what `make autograde` runs)
gives the teacher's solution full marks and zero points to every cheating submission on the
task it targets (issue 20, item 4).

Submissions, built from the released notebook or the teacher's:
- *solution*: the student version with the teacher's solution cells put back;
- *release*: the student version, untouched;
- *typed*: the student version with, before every check, a cell that sets every value the check
  reads to what it was in the teacher's run (the strongest "type the answer" there is);
- the lab's *reference cheats* (tests/grading_cheats.py): one task's solution handed to a
  reference implementation, called directly, bound before the check, or through importlib.

One `autograde` call grades the solution (which records the values for the typed cheat) and the
release side by side, a second grades the other cheats.  The solution and the release run in full; a cheat skips the lab's
own experiments (a student may delete any cell that is not a solution or a check), and every
check it fails must fail on what it measured, not on a missing name.  `make test` runs one
reference cheat of each kind per lab (spread over its tasks); `make test-cheats` runs them all.
"""
from __future__ import annotations

import ast
import builtins
import os
import re
from pathlib import Path

import nbformat
import pytest

from gnnbook.course.release import annotate, autograde, default_labs, release
from grading_cheats import CHEATS, Cheat, one_of_each_kind

ROOT = Path(__file__).resolve().parents[1]
LABS = {lab.stem: lab for lab in default_labs(ROOT)}
GRADED = sorted(CHEATS)          # the labs this suite covers (their nbval run is replaced by it)
ALL_CHEATS = os.environ.get("GNNBOOK_ALL_CHEATS") == "1"    # `make test-cheats`; else one of each kind
STUB = re.compile(r"^([ \t]*)raise NotImplementedError\(\)[ \t]*$", re.MULTILINE)

# Run before a check in the solution's run: pickle every value the check reads (not modules,
# functions or classes: a student cannot type those) to a file named after the check.
RECORD = """\
import pickle as _pickle, types as _types
_typed = {{}}
for _name in {names!r}:
    _value = globals().get(_name)
    if _value is None or isinstance(_value, (_types.ModuleType, _types.FunctionType, type)):
        continue
    try:
        _typed[_name] = _pickle.dumps(_value)
    except Exception:
        pass
open({path!r}, "wb").write(_pickle.dumps(_typed))"""
# Run before the same check in the typed cheat: set those values.
TYPE = """\
import pickle as _pickle
globals().update({{_name: _pickle.loads(_value) for _name, _value in _pickle.load(open({path!r}, "rb")).items()}})"""


def _grade_id(cell) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id", "")


def _task(grade_id: str) -> int:
    return int(grade_id.split("-")[0][4:])


def read_names(source: str) -> list[str]:
    """The global names a check cell reads without assigning them first (what a student could type)."""
    tree = ast.parse(source)
    assigned = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return sorted(loaded - assigned - set(dir(builtins)))


def with_checks_wrapped(nb, cell_source) -> nbformat.NotebookNode:
    """``nb`` with a new cell, ``cell_source(check_cell)``, before every check cell."""
    out = nbformat.from_dict(nb)
    cells = []
    for cell in out.cells:
        if "check" in _grade_id(cell):
            cells.append(nbformat.v4.new_code_cell(cell_source(cell), metadata={"cheat": True}))
        cells.append(cell)
    out.cells = cells
    return out


def apply_cheat(released, sources: dict[str, str], cheat: Cheat) -> nbformat.NotebookNode:
    """The student version with the earlier tasks solved as the teacher did (a task may build on
    them), ``cheat``'s task solved by the cheat's code, and the later tasks unsolved (their checks
    fail fast; a check of the target that needed one fails with NotImplementedError, which the
    test refuses as a wrongly built cheat)."""
    nb = nbformat.from_dict(released)
    region, cell_index = 0, 0
    for cell in nb.cells:
        if "solution" not in _grade_id(cell):
            continue
        if _task(_grade_id(cell)) < cheat.task:
            cell.source = sources[_grade_id(cell)]
        if _task(_grade_id(cell)) != cheat.task:
            continue

        def replace(match):
            nonlocal region
            body = cheat.regions.get(region)
            region += 1
            if body is None:
                return match.group(0)
            return "\n".join(match.group(1) + line for line in body.splitlines())

        cell.source = STUB.sub(replace, cell.source)
        if cell_index in cheat.preamble:
            lines = cell.source.splitlines()
            at = 1 if lines and lines[0].startswith("%%") else 0    # after a cell magic
            cell.source = "\n".join(lines[:at] + cheat.preamble[cell_index].splitlines() + lines[at:])
        cell_index += 1
    assert region >= max(cheat.regions) + 1, f"{cheat.name}: task {cheat.task} has only {region} solution regions"
    return nb


def without_runs(nb) -> nbformat.NotebookNode:
    """A cheat does not run the lab's own experiments: only the setup (the cells before the first
    solution), the solution cells and the checks stay (and what was put before the checks)."""
    out = nbformat.from_dict(nb)
    first = next(i for i, c in enumerate(out.cells) if "solution" in _grade_id(c))
    out.cells = [c for i, c in enumerate(out.cells) if c.cell_type == "code" and (
        i < first or _grade_id(c) or c.metadata.get("cheat"))]
    return out


def grade(lab: Path, submissions: dict[str, nbformat.NotebookNode], folder: Path, jobs: int = 1) -> tuple[dict, Path]:
    """Autograde ``submissions`` (student name -> notebook), ``jobs`` at a time; returns
    {student: {task: (points, most)}} and the folder of executed notebooks."""
    for student, nb in submissions.items():
        (folder / "in" / student).mkdir(parents=True)
        nbformat.write(nb, folder / "in" / student / lab.name)
    rows = autograde(folder / "in", [lab], folder / "grades.csv", folder / "autograded", jobs=jobs)
    table: dict[str, dict[int, tuple[float, float]]] = {}
    for r in rows:
        table.setdefault(r["student"], {})[int(r["task"][4:])] = (r["points"], r["max_points"])
    return table, folder / "autograded"


def errors(notebook: Path) -> dict[str, str]:
    """grade id -> 'Error: message' for the graded cells that raised."""
    nb = nbformat.read(notebook, as_version=4)
    return {_grade_id(c): f"{o['ename']}: ...{o['evalue'][-400:]}" for c in nb.cells if "check" in _grade_id(c)
            for o in c.get("outputs", []) if o.get("output_type") == "error"}


def failed_for_another_reason(notebook: Path, task: int) -> dict[str, str]:
    """The task's checks that failed because a name was missing or another task's function is
    unsolved (a cheat built wrongly, not a check that refused it): grade id -> error."""
    return {gid: e for gid, e in errors(notebook).items()
            if _task(gid) == task and (e.startswith("NameError") or "NotImplementedError" in e)}


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name", GRADED)
def test_only_the_solution_earns_points(name, tmp_path):
    lab = LABS[name]
    teacher = annotate(nbformat.read(lab, as_version=4), lab.name)
    (student,) = release([lab], tmp_path / "release")
    released = nbformat.read(student, as_version=4)
    sources = {_grade_id(c): c.source for c in teacher.cells if _grade_id(c)}
    tasks = sorted({_task(i) for i in sources})

    solution = nbformat.from_dict(released)
    for cell in solution.cells:
        if "solution" in _grade_id(cell):
            cell.source = sources[_grade_id(cell)]
    record = tmp_path / "typed"
    record.mkdir()
    solution = with_checks_wrapped(solution, lambda check: RECORD.format(
        names=read_names(sources[_grade_id(check)]), path=str(record / f"{_grade_id(check)}.pkl")))
    # the two full runs side by side (as a teacher with `--jobs 2`): the solution and the untouched release
    first, executed = grade(lab, {"solution": solution, "release": released}, tmp_path / "first", jobs=2)
    for task in tasks:
        points, most = first["solution"][task]
        assert most > 0 and points == most, (f"the solution scores {points}/{most} on task {task}: "
                                             f"{errors(executed / 'solution' / lab.stem / lab.name)}")

    cheats = {"typed": without_runs(with_checks_wrapped(released, lambda check: TYPE.format(
        path=str(record / f"{_grade_id(check)}.pkl"))))}
    names = {f"cheat{i}": cheat for i, cheat in enumerate(CHEATS[name] if ALL_CHEATS else one_of_each_kind(CHEATS[name]))}
    cheats |= {student: without_runs(apply_cheat(released, sources, cheat)) for student, cheat in names.items()}
    # the cheats two at a time (as a teacher with `--jobs 2`): each is mostly a kernel start and the lab's imports
    marks, executed = grade(lab, cheats, tmp_path / "second", jobs=2)
    marks["release"] = first["release"]
    scored = {}
    for student in ("release", "typed"):
        scored |= {f"{student} task {t}": marks[student][t] for t in tasks if marks[student][t][0] > 0}
    for student, cheat in names.items():
        points, most = marks[student][cheat.task]
        if points > 0:
            scored[f"{cheat.name} (task {cheat.task})"] = (points, most, errors(executed / student / lab.stem / lab.name))
        wrong = failed_for_another_reason(executed / student / lab.stem / lab.name, cheat.task)
        assert not wrong, f"{name}: the cheat {cheat.name!r} is built wrongly (a check missed a name or met an unsolved task): {wrong}"
    assert not scored, f"{name}: cheats that earned points: {scored}"
