"""The labs' grades can only be earned: for every lab, `autograde` (what `make autograde` runs)
gives the teacher's solution full marks and zero points to every cheating submission on the
task it targets (issue 20, item 4; issue 37: every lab is graded outside the student's kernel).

Submissions, built from the released notebook or the teacher's:
- *solution*: the student version with the teacher's solution cells put back;
- *release*: the student version, untouched (not attempted: no process is started for it);
- the lab's *reference cheats* (tests/grading_cheats.py): one task's solution handed to a
  reference implementation, called directly, bound before the check, or through importlib, and the
  *isolation cheats*, which reach around the checks themselves (a cell transformer, a frame walk, a
  copied code object, a write into the package, a hang, ...).

(A student typing the teacher's numbers before every check, the strongest cheat while checks ran in the
student's kernel, is no cheat here: check cells are not run, and the checks draw their inputs in the grader.)

One `autograde` call grades every selected lab's solution and release; a second grades the cheats.  A
cheat's every failed check must fail on what it measured, not on a missing name.  `make test` runs one
reference cheat of each kind per lab (spread over its tasks) and one cheat of each isolation kind in the course
(lab 2 has one of every class), beside an honest submission where the cheat could reach a neighbour (a hang, a
write into the package); `make test-cheats` runs them all.
"""
from __future__ import annotations

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
# A check takes at most about 10 s here (lab 3's ring on 2 and 3 ranks); the hang cheat spends this once.
CHECK_DEADLINE_S = 30
STUB = re.compile(r"^([ \t]*)raise NotImplementedError\(\)[ \t]*$", re.MULTILINE)


def _grade_id(cell) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id", "")


def _task(grade_id: str) -> int:
    return int(grade_id.split("-")[0][4:])


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


def grade(labs: list[Path], submissions: dict[tuple[str, str], nbformat.NotebookNode], folder: Path
          ) -> tuple[dict, dict]:
    """Autograde ``submissions`` ((student, lab stem) -> notebook) in one call (each check gets
    CHECK_DEADLINE_S); returns {(student, lab stem): {task: (points, most)}} and {(student, lab stem): {task: why}}."""
    by_stem = {lab.stem: lab for lab in labs}
    for (student, stem), nb in submissions.items():
        (folder / "in" / student).mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, folder / "in" / student / by_stem[stem].name)
    used = sorted({stem for _, stem in submissions})
    rows = autograde(folder / "in", [by_stem[s] for s in used], folder / "grades.csv", feedback=folder / "feedback",
                     check_deadline_s=CHECK_DEADLINE_S)
    table: dict[tuple[str, str], dict[int, tuple[float, float]]] = {}
    whys: dict[tuple[str, str], dict[int, str]] = {}
    for r in rows:
        table.setdefault((r["student"], r["lab"]), {})[int(r["task"][4:])] = (r["points"], r["max_points"])
        whys.setdefault((r["student"], r["lab"]), {})[int(r["task"][4:])] = r["why"]
    return table, whys


def _selected(request) -> list[str]:
    """The labs whose test this session runs (``-k lab04`` grades lab 4 only)."""
    names = {item.callspec.params["name"] for item in request.session.items
             if getattr(item, "originalname", "") == "test_only_the_solution_earns_points"
             and hasattr(item, "callspec")}
    return sorted(names) or GRADED


@pytest.fixture(scope="module")
def graded(request, tmp_path_factory) -> dict[str, dict]:
    """Every selected lab graded in two `autograde` calls: first the solutions and the untouched releases, then
    the cheats (and an honest submission beside the cheats that could reach a neighbour)."""
    tmp = tmp_path_factory.mktemp("grading")
    labs, first_round, plans, tasks = [LABS[name] for name in _selected(request)], {}, {}, {}
    for lab in labs:
        assert grading_module(lab.stem) is not None, f"{lab.stem} is not graded outside the student's kernel"
        teacher = annotate(nbformat.read(lab, as_version=4), lab.name)
        (student,) = release([lab], tmp / "release" / lab.stem)
        released = nbformat.read(student, as_version=4)
        sources = {_grade_id(c): c.source for c in teacher.cells if _grade_id(c)}
        solution = nbformat.from_dict(released)
        for cell in solution.cells:
            if "solution" in _grade_id(cell):
                cell.source = sources[_grade_id(cell)]
        first_round[("solution", lab.stem)] = solution
        first_round[("release", lab.stem)] = released
        plans[lab.stem] = (released, sources)
        tasks[lab.stem] = sorted({_task(i) for i in sources})
    start = time.perf_counter()
    first, first_why = grade(labs, first_round, tmp / "first")
    seconds = {"solutions": time.perf_counter() - start}
    second_round, names = {}, {}
    for lab in labs:
        released, sources = plans[lab.stem]
        cheats = CHEATS[lab.stem] if ALL_CHEATS else for_make_test(lab.stem)
        names[lab.stem] = {f"cheat{i}": cheat for i, cheat in enumerate(cheats)}
        for student, cheat in names[lab.stem].items():
            second_round[(student, lab.stem)] = without_runs(apply_cheat(released, sources, cheat))
        # an honest submission, graded beside a hang or a write into the package (the solutions' round already
        # grades every lab's solution alone)
        if any(c.kind in ("hang", "package-write") for c in cheats):
            second_round[("honest", lab.stem)] = first_round[("solution", lab.stem)]
    checkout = _checkout_state()
    start = time.perf_counter()
    second, second_why = grade(labs, second_round, tmp / "second")
    assert _checkout_state() == checkout, "grading the cheats changed the grader's checkout"
    seconds["cheats"] = time.perf_counter() - start
    # The solutions' round replaces the labs' nbval runs (conftest.py skips them): what grading adds to
    # make test is the cheats' round.  Beside build/notebook-times.json, for the note and for CI logs.
    (ROOT / "build").mkdir(exist_ok=True)
    (ROOT / "build" / "grading-times.json").write_text(json.dumps(
        {"labs": [lab.stem for lab in labs], **{f"{k}_seconds": round(v, 1) for k, v in seconds.items()}}, indent=1))
    print(f"grading: solutions {seconds['solutions']:.0f} s, cheats {seconds['cheats']:.0f} s")
    return {lab.stem: dict(first=first, second=second, first_why=first_why, second_why=second_why,
                           cheats=names[lab.stem], tasks=tasks[lab.stem])
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
    run = graded[name]
    solution = run["first"][("solution", name)]
    assert sorted(solution) == run["tasks"], f"{name}: graded tasks {sorted(solution)}, the lab has {run['tasks']}"
    for task, (points, most) in solution.items():
        assert most > 0 and points == most, \
            f"the solution scores {points}/{most} on task {task}: {run['first_why'][('solution', name)][task]}"
    release = run["first_why"][("release", name)]
    assert all(why.startswith("not attempted") for why in release.values()), f"{name}: the release: {release}"
    scored = {f"release task {t}": pm for t, pm in run["first"][("release", name)].items() if pm[0] > 0}
    for student, cheat in run["cheats"].items():
        points, most = run["second"][(student, name)][cheat.task]
        why = run["second_why"][(student, name)][cheat.task]
        if points > 0:
            scored[f"{cheat.name} (task {cheat.task})"] = (points, most, why)
        assert why, f"{name}: the cheat {cheat.name!r} scored 0 without a reason"
        assert "NotImplementedError" not in why and "NameError" not in why, \
            f"{name}: the cheat {cheat.name!r} is built wrongly: {why}"
        assert cheat.expect in why, f"{name}: the cheat {cheat.name!r} scored 0, but not for {cheat.expect!r}: {why}"
    assert not scored, f"{name}: cheats that earned points: {scored}"
    if ("honest", name) in run["second"]:
        honest = run["second"][("honest", name)]
        assert all(points == most for points, most in honest.values()), \
            (f"{name}: an honest submission graded beside the cheats lost points: {honest} "
             f"{run['second_why'][('honest', name)]}")
