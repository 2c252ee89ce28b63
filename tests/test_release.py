"""The classroom release (nbgrader): student versions fail their checks, solutions get full marks."""
import csv
from pathlib import Path

import nbformat
import pytest

from gnnbook.course.release import (ReleaseError, annotate, autograde, default_labs, find_submissions,
                                      release)

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "labs" / "lab02_message_passing.ipynb"     # the fastest lab (~10 s)


def _nbgrader(cell):
    return cell.metadata.get("nbgrader", {})


@pytest.mark.parametrize("lab", default_labs(ROOT), ids=lambda p: p.stem)
def test_every_lab_has_solutions_and_a_check_per_task(lab):
    nb = annotate(nbformat.read(lab, as_version=4), lab.name)
    ids = [_nbgrader(c)["grade_id"] for c in nb.cells if _nbgrader(c)]
    assert len(ids) == len(set(ids))
    solved = {i.split("-")[0] for i in ids if "solution" in i}
    checked = {i.split("-")[0] for i in ids if "check" in i}
    assert solved and solved <= checked


def test_annotate_follows_the_task_headings_and_refuses_an_unchecked_task():
    cell = nbformat.v4
    nb = cell.new_notebook(cells=[
        cell.new_markdown_cell("Fill in `### BEGIN SOLUTION` ... `### END SOLUTION`."),
        cell.new_code_cell("x = 1\n### BEGIN SOLUTION\ny = 2\n### END SOLUTION"),
        cell.new_code_cell("# Check: y\nassert y == 2"),
        cell.new_markdown_cell("## Task 2 · more"),
        cell.new_code_cell("### BEGIN SOLUTION\nz = 3\n### END SOLUTION"),
        cell.new_code_cell("print(z)   # not a check")])
    with pytest.raises(ReleaseError, match=r"task\(s\) \[2\].*# Check"):
        annotate(nb, "demo")
    nb.cells.append(cell.new_code_cell("  # Check: z\nassert z == 3"))
    annotate(nb, "demo")
    assert [_nbgrader(c).get("grade_id") for c in nb.cells] == \
        [None, "task1-solution1", "task1-check1", None, "task2-solution1", None, "task2-check1"]
    assert _nbgrader(nb.cells[2])["points"] == 1 and _nbgrader(nb.cells[2])["locked"]
    assert "BEGIN SOLUTION" not in nb.cells[0].source, "prose naming the markers is not cleared by nbgrader"


def test_submissions_must_be_named_as_labs(tmp_path):
    with pytest.raises(ReleaseError, match="does not exist"):
        find_submissions(tmp_path / "missing", [LAB])
    (tmp_path / "alice").mkdir()
    with pytest.raises(ReleaseError, match="no submissions"):
        find_submissions(tmp_path, [LAB])
    (tmp_path / "alice" / "homework.ipynb").write_text("{}")
    with pytest.raises(ReleaseError, match="not labs of the course"):
        find_submissions(tmp_path, [LAB])


def _errors(notebook: Path) -> dict[str, str]:
    """grade_id -> exception name, for the graded and solution cells that raised."""
    nb = nbformat.read(notebook, as_version=4)
    return {_nbgrader(c)["grade_id"]: o["ename"] for c in nb.cells if _nbgrader(c)
            for o in c.get("outputs", []) if o.get("output_type") == "error"}


@pytest.mark.timeout(1200)
def test_release_then_autograde_gives_zero_to_the_student_version_and_full_marks_to_the_solution(tmp_path):
    (student,) = release([LAB], tmp_path / "release")
    released = nbformat.read(student, as_version=4)
    teacher = annotate(nbformat.read(LAB, as_version=4), LAB.name)
    code = "\n".join(c.source for c in released.cells if c.cell_type == "code")
    assert "BEGIN SOLUTION" not in code and "raise NotImplementedError()" in code
    by_id = {_nbgrader(c)["grade_id"]: c for c in teacher.cells if _nbgrader(c)}
    checks = [c for c in released.cells if _nbgrader(c).get("grade")]
    assert checks and all(c.source == by_id[_nbgrader(c)["grade_id"]].source for c in checks), "checks kept"

    # Alice hands in the untouched student version; Bob puts the solution cells back.
    (tmp_path / "in" / "alice").mkdir(parents=True)
    (tmp_path / "in" / "bob").mkdir()
    nbformat.write(released, tmp_path / "in" / "alice" / LAB.name)
    for cell in released.cells:
        if _nbgrader(cell).get("solution"):
            cell.source = by_id[_nbgrader(cell)["grade_id"]].source
    nbformat.write(released, tmp_path / "in" / "bob" / LAB.name)

    grades = tmp_path / "grades.csv"
    rows = autograde(tmp_path / "in", [LAB], grades, tmp_path / "autograded")
    assert rows == [dict(r, points=float(r["points"]), max_points=float(r["max_points"]))
                    for r in csv.DictReader(grades.open())]
    tasks = sorted({i.split("-")[0] for i in by_id})
    for who, expected in (("alice", 0.0), ("bob", None)):
        mine = [r for r in rows if r["student"] == who]
        assert [r["task"] for r in mine] == tasks, "one row per task"
        for r in mine:
            assert r["max_points"] > 0 and r["points"] == (r["max_points"] if expected is None else expected), r
    untouched = _errors(tmp_path / "autograded" / "alice" / LAB.stem / LAB.name)
    solved = _errors(tmp_path / "autograded" / "bob" / LAB.stem / LAB.name)
    assert {c for c in by_id if "check" in c} <= set(untouched), "every check fails on the student version"
    assert "NotImplementedError" in untouched.values(), "it fails because the solution is missing"
    assert not solved, f"the solution raised in {solved}"
