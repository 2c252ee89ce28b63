"""The classroom release (nbgrader): student versions fail their checks, solutions get full marks."""
import csv
from pathlib import Path

import nbformat
import pytest

from gnnbook.course.release import (ReleaseError, annotate, autograde, default_labs, find_submissions,
                                      grades_summary, release)

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


def _toy_lab(folder: Path) -> Path:
    """Two tasks, each with a check; task 2's check has a hidden test the release removes."""
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("## Task 1 · one"),
        nbformat.v4.new_code_cell("def one():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION"),
        nbformat.v4.new_code_cell("# Check: one returns 1\nassert one() == 1, 'one() must return 1'"),
        nbformat.v4.new_markdown_cell("## Task 2 · add"),
        nbformat.v4.new_code_cell("def add(a, b):\n    ### BEGIN SOLUTION\n    return a + b\n    ### END SOLUTION"),
        nbformat.v4.new_code_cell("# Check: add adds\nassert add(2, 3) == 5, 'add(2, 3) must be 5'\n"
                                  "### BEGIN HIDDEN TESTS\nassert add(-1, 1) == 0, 'add(-1, 1) must be 0'\n"
                                  "### END HIDDEN TESTS")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    lab = folder / "toy_lab.ipynb"
    nbformat.write(nb, lab)
    return lab


@pytest.mark.timeout(300)
def test_autograde_survives_loops_and_crashes_and_says_why(tmp_path):
    lab = _toy_lab(tmp_path)
    (student,) = release([lab], tmp_path / "release")
    released = nbformat.read(student, as_version=4)
    code = "\n".join(c.source for c in released.cells if c.cell_type == "code")
    assert "BEGIN SOLUTION" not in code and "raise NotImplementedError()" in code
    assert "add(-1, 1)" not in code and "add(2, 3)" in code, "hidden tests leave the release, visible ones stay"

    def hand_in(who: str, one: str, add: str) -> None:
        nb = nbformat.from_dict(released)
        nb.cells[1].source, nb.cells[4].source = one, add
        (tmp_path / "in" / who).mkdir(parents=True)
        nbformat.write(nb, tmp_path / "in" / who / lab.name)

    correct = "def add(a, b):\n    return a + b"
    hand_in("ann", "def one():\n    return 1", correct)
    hand_in("looper", "def one():\n    while True:\n        pass", correct)    # never returns
    hand_in("crasher", "import os\nos._exit(3)", correct)                    # kills the kernel
    hand_in("typist", "def one():\n    return 1", "def add(a, b):\n    return 5")   # passes the visible test only
    grades = tmp_path / "grades.csv"
    # two workers (what `make autograde` does with --jobs 2): the rows come back in the submissions' order
    rows = autograde(tmp_path / "in", [lab], grades, tmp_path / "executed", cell_timeout_s=5, jobs=2)
    assert rows == [dict(r, points=float(r["points"]), max_points=float(r["max_points"]))
                    for r in csv.DictReader(grades.open())]
    assert [r["student"] for r in rows] == ["ann"] * 2 + ["crasher"] * 2 + ["looper"] * 2 + ["typist"] * 2
    assert {p.name for p in (tmp_path / "executed").iterdir()} >= {"ann", "looper", "typist"}, "both workers' notebooks"
    with pytest.raises(ReleaseError, match="jobs"):
        autograde(tmp_path / "in", [lab], grades, jobs=0)
    got = {(r["student"], r["task"]): (r["points"], r["why"]) for r in rows}
    assert got[("ann", "task1")] == (1.0, "") and got[("ann", "task2")] == (1.0, "")
    assert got[("looper", "task1")][0] == 0 and "deadline" in got[("looper", "task1")][1]
    assert got[("looper", "task2")] == (1.0, ""), "the loop is stopped, the next task is graded"
    assert all(got[("crasher", t)][0] == 0 and "kernel died" in got[("crasher", t)][1] for t in ("task1", "task2"))
    assert got[("typist", "task2")][0] == 0 and "add(-1, 1) must be 0" in got[("typist", "task2")][1]
    assert "deadline" in grades_summary(rows), "the table a teacher reads says why"


def test_a_measurement_that_cannot_be_taken_scores_nothing_under_the_grader(monkeypatch, tmp_path):
    """Issue 37, item 5: where exact memory is unavailable, a student's run skips the check; the grader's
    kernels (GNNBOOK_GRADING=1) get NotGradedHere, which the grade table reports as 'not graded here'."""
    from gnnbook.course.labcheck import GRADING_ENV, NotGradedHere, graded_measurement
    from gnnbook.course.release import failed_checks

    monkeypatch.delenv(GRADING_ENV, raising=False)
    assert graded_measurement(False, "the memory budget") is False
    monkeypatch.setenv(GRADING_ENV, "1")
    assert graded_measurement(True, "the memory budget") is True
    with pytest.raises(NotGradedHere, match="the memory budget is not graded here") as raised:
        graded_measurement(False, "the memory budget")
    cell = nbformat.v4.new_code_cell("# Check", metadata={"nbgrader": {"grade_id": "task2-check1"}})
    cell.outputs = [nbformat.v4.new_output("error", ename="NotGradedHere", evalue=str(raised.value), traceback=[])]
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), tmp_path / "graded.ipynb")
    assert failed_checks(tmp_path / "graded.ipynb")["task2"].startswith("task2-check1: not graded here: "
                                                                        "the memory budget")
