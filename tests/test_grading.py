"""The labs' grades can only be earned: for every lab, `autograde` (what `make autograde` runs)
gives the teacher's solution full marks and zero points to every cheating submission on the
task it targets (issue 20, item 4).

Submissions, built from the released notebook or the teacher's:
- *solution*: the student version with the teacher's solution cells put back;
- *release*: the student version, untouched (only under `make test-cheats`: the typed cheat below is
  the release with every value its checks read set to the teacher's, a strictly stronger submission);
- *typed*: the student version with, before every check, a cell that sets every value the check
  reads to what it was in the teacher's run (the strongest "type the answer" there is);
- the lab's *reference cheats* (tests/grading_cheats.py): one task's solution handed to a
  reference implementation, called directly, bound before the check, or through importlib.

One `autograde` call grades every selected lab's solution (which records the values for the typed
cheat), two at a time; a second grades the cheats.  The solution (and the release) run in full; a cheat skips the lab's
own experiments (a student may delete any cell that is not a solution or a check), and every
check it fails must fail on what it measured, not on a missing name.  `make test` runs one
reference cheat of each kind per lab (spread over its tasks) and one cheat of each isolation kind in the course
(issue 37: lab 2 has one of every class); `make test-cheats` runs them all.
"""
from __future__ import annotations

import ast
import builtins
import json
import os
import re
import time
from pathlib import Path

import nbformat
import pytest

from gnnbook.course.grading.engine import grading_module
from gnnbook.course.release import annotate, autograde, default_labs, release
from grading_cheats import CHEATS, Cheat, for_make_test

ROOT = Path(__file__).resolve().parents[1]
LABS = {lab.stem: lab for lab in default_labs(ROOT)}
GRADED = sorted(CHEATS)          # the labs this suite covers (their nbval run is replaced by it)
ALL_CHEATS = os.environ.get("GNNBOOK_ALL_CHEATS") == "1"    # `make test-cheats`; else one of each kind
# A check of a lab graded outside the kernel takes seconds; the hang cheat spends this once.
CHECK_DEADLINE_S = 60
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
    if cheat.cell:
        first = next(i for i, c in enumerate(nb.cells) if "solution" in _grade_id(c))
        nb.cells.insert(first, nbformat.v4.new_code_cell(cheat.cell, metadata={"cheat": True}))
    return nb


def without_runs(nb) -> nbformat.NotebookNode:
    """A cheat does not run the lab's own experiments: only the setup (the cells before the first
    solution), the solution cells and the checks stay (and what was put before the checks)."""
    out = nbformat.from_dict(nb)
    first = next(i for i, c in enumerate(out.cells) if "solution" in _grade_id(c))
    out.cells = [c for i, c in enumerate(out.cells) if c.cell_type == "code" and (
        i < first or _grade_id(c) or c.metadata.get("cheat"))]
    return out


def grade(labs: list[Path], submissions: dict[tuple[str, str], nbformat.NotebookNode], folder: Path,
          jobs: int = 2) -> tuple[dict, Path, dict]:
    """Autograde ``submissions`` ((student, lab stem) -> notebook), ``jobs`` at a time, in one call (each
    check of a lab graded outside the kernel gets CHECK_DEADLINE_S); returns {(student, lab stem): {task:
    (points, most)}}, the folder of executed notebooks (labs graded by nbgrader) and {(student, lab stem):
    {task: why}}."""
    by_stem = {lab.stem: lab for lab in labs}
    for (student, stem), nb in submissions.items():
        (folder / "in" / student).mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, folder / "in" / student / by_stem[stem].name)
    used = sorted({stem for _, stem in submissions})
    rows = autograde(folder / "in", [by_stem[s] for s in used], folder / "grades.csv", folder / "autograded", jobs=jobs,
                     feedback=folder / "feedback", check_deadline_s=CHECK_DEADLINE_S)
    table: dict[tuple[str, str], dict[int, tuple[float, float]]] = {}
    whys: dict[tuple[str, str], dict[int, str]] = {}
    for r in rows:
        table.setdefault((r["student"], r["lab"]), {})[int(r["task"][4:])] = (r["points"], r["max_points"])
        whys.setdefault((r["student"], r["lab"]), {})[int(r["task"][4:])] = r["why"]
    return table, folder / "autograded", whys


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


def _selected(request) -> list[str]:
    """The labs whose test this session runs (``-k lab04`` grades lab 4 only)."""
    names = {item.callspec.params["name"] for item in request.session.items
             if getattr(item, "originalname", "") == "test_only_the_solution_earns_points" and hasattr(item, "callspec")}
    return sorted(names) or GRADED


@pytest.fixture(scope="module")
def graded(request, tmp_path_factory) -> dict[str, dict]:
    """Every selected lab graded in two `autograde` calls of two workers each (as a teacher with `--jobs 2`):
    first the solutions (recording what the typed cheat types) and, under `make test-cheats`, the untouched
    releases, then the typed and
    the reference cheats.  One call for all labs keeps both workers busy: a lab's solution run is long, its
    cheats short."""
    tmp = tmp_path_factory.mktemp("grading")
    labs, first_round, plans, tasks = [LABS[name] for name in _selected(request)], {}, {}, {}
    for lab in labs:
        teacher = annotate(nbformat.read(lab, as_version=4), lab.name)
        (student,) = release([lab], tmp / "release" / lab.stem)
        released = nbformat.read(student, as_version=4)
        sources = {_grade_id(c): c.source for c in teacher.cells if _grade_id(c)}
        solution = nbformat.from_dict(released)
        for cell in solution.cells:
            if "solution" in _grade_id(cell):
                cell.source = sources[_grade_id(cell)]
        record = tmp / "typed" / lab.stem
        record.mkdir(parents=True)
        first_round[("solution", lab.stem)] = with_checks_wrapped(solution, lambda check, r=record, s=sources: RECORD.format(
            names=read_names(s[_grade_id(check)]), path=str(r / f"{_grade_id(check)}.pkl")))
        if ALL_CHEATS or grading_module(lab.stem) is not None:     # outside the kernel, the release costs seconds
            first_round[("release", lab.stem)] = released
        plans[lab.stem] = (released, sources, record)
        tasks[lab.stem] = sorted({_task(i) for i in sources})
    start = time.perf_counter()
    first, first_executed, first_why = grade(labs, first_round, tmp / "first")
    seconds = {"solutions": time.perf_counter() - start}
    second_round, names = {}, {}
    for lab in labs:
        released, sources, record = plans[lab.stem]
        second_round[("typed", lab.stem)] = without_runs(with_checks_wrapped(released, lambda check, r=record: TYPE.format(
            path=str(r / f"{_grade_id(check)}.pkl"))))
        cheats = CHEATS[lab.stem] if ALL_CHEATS else for_make_test(lab.stem)
        names[lab.stem] = {f"cheat{i}": cheat for i, cheat in enumerate(cheats)}
        for student, cheat in names[lab.stem].items():
            second_round[(student, lab.stem)] = without_runs(apply_cheat(released, sources, cheat))
        # an honest submission, graded beside a hang or a write into the package (the solutions' round already
        # grades every lab's solution alone)
        if grading_module(lab.stem) is not None and any(c.kind in ("hang", "package-write") for c in cheats):
            second_round[("honest", lab.stem)] = first_round[("solution", lab.stem)]
    checkout = _checkout_state()
    start = time.perf_counter()
    second, second_executed, second_why = grade(labs, second_round, tmp / "second")
    assert _checkout_state() == checkout, "grading the cheats changed the grader's checkout"
    seconds["cheats"] = time.perf_counter() - start
    # The solutions' round replaces the labs' nbval runs (conftest.py skips them): what grading adds to
    # make test is the cheats' round.  Beside build/notebook-times.json, for the note and for CI logs.
    (ROOT / "build").mkdir(exist_ok=True)
    (ROOT / "build" / "grading-times.json").write_text(json.dumps(
        {"labs": [lab.stem for lab in labs], **{f"{k}_seconds": round(v, 1) for k, v in seconds.items()}}, indent=1))
    print(f"grading: solutions {seconds['solutions']:.0f} s, cheats {seconds['cheats']:.0f} s")
    return {lab.stem: dict(first=first, first_executed=first_executed, second=second, first_why=first_why,
                           second_executed=second_executed, second_why=second_why, cheats=names[lab.stem],
                           tasks=tasks[lab.stem])
            for lab in labs}


def _checkout_state() -> str:
    """The package's tracked and untracked changes and its code's bytes (what the package-write cheat writes to;
    the rest of the checkout is left out, so that editing a notebook while the tests run is no failure)."""
    import hashlib
    import subprocess

    status = subprocess.run(["git", "status", "--porcelain", "--", "gnnbook"], cwd=ROOT, capture_output=True,
                            text=True).stdout
    code = hashlib.sha256(b"".join(p.read_bytes() for p in sorted((ROOT / "gnnbook").rglob("*.py")))).hexdigest()
    return status + code


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("name", GRADED)
def test_only_the_solution_earns_points(name, graded):
    lab, run = LABS[name], graded[name]
    solution = run["first"][("solution", name)]
    assert sorted(solution) == run["tasks"], f"{name}: graded tasks {sorted(solution)}, the lab has {run['tasks']}"
    for task, (points, most) in solution.items():
        assert most > 0 and points == most, (f"the solution scores {points}/{most} on task {task}: "
                                             + (run["first_why"][("solution", name)][task] if grading_module(name)
                                                else str(errors(run['first_executed'] / 'solution' / lab.stem / lab.name))))
    scored = {f"release task {t}": pm for t, pm in run["first"].get(("release", name), {}).items() if pm[0] > 0}
    scored |= {f"typed task {t}": pm for t, pm in run["second"][("typed", name)].items() if pm[0] > 0}
    isolated = grading_module(name) is not None
    for student, cheat in run["cheats"].items():
        points, most = run["second"][(student, name)][cheat.task]
        why = run["second_why"][(student, name)][cheat.task]
        if isolated:
            if points > 0:
                scored[f"{cheat.name} (task {cheat.task})"] = (points, most, why)
            assert why, f"{name}: the cheat {cheat.name!r} scored 0 without a reason"
            assert "NotImplementedError" not in why and "NameError" not in why, \
                f"{name}: the cheat {cheat.name!r} is built wrongly: {why}"
            assert cheat.expect in why, f"{name}: the cheat {cheat.name!r} scored 0, but not for {cheat.expect!r}: {why}"
            continue
        executed = run["second_executed"] / student / lab.stem / lab.name
        if points > 0:
            scored[f"{cheat.name} (task {cheat.task})"] = (points, most, errors(executed))
        wrong = failed_for_another_reason(executed, cheat.task)
        assert not wrong, f"{name}: the cheat {cheat.name!r} is built wrongly (a check missed a name or met an unsolved task): {wrong}"
        assert cheat.expect in str(errors(executed)), f"{name}: {cheat.name!r} scored 0, not for {cheat.expect!r}: {errors(executed)}"
    assert not scored, f"{name}: cheats that earned points: {scored}"
    if isolated and ("honest", name) in run["second"]:
        honest = run["second"][("honest", name)]
        assert all(points == most for points, most in honest.values()), \
            f"{name}: an honest submission graded beside the cheats lost points: {honest} {run['second_why'][('honest', name)]}"
