"""Every course command that executes notebooks gives each cell a deadline whose message names the
notebook and the cell (issue 44, item 3): `make course` and `make test-matrix` (and test_papermill) through
`course_run.execute_notebook`, nbval through pytest's `--nbval-cell-timeout`, autograde through nbgrader's
`Execute.timeout` (tests/test_release.py)."""
from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest

from gnnbook.course.course_run import CellDeadline, execute_notebook, run_notebook

ROOT = Path(__file__).resolve().parents[1]


def sleepy_notebook(folder: Path) -> Path:
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    parameters = nbformat.v4.new_code_cell("results_path = None")
    parameters.metadata["tags"] = ["parameters"]
    nb.cells = [parameters, nbformat.v4.new_code_cell("x = 1"),
                nbformat.v4.new_code_cell("# a cell that never ends\nimport time\ntime.sleep(600)")]
    path = folder / "sleepy.ipynb"
    nbformat.write(nb, path)
    return path


def test_a_cell_past_its_deadline_is_stopped_and_named(tmp_path):
    path = sleepy_notebook(tmp_path)
    start = time.monotonic()
    with pytest.raises(CellDeadline, match=r"sleepy.ipynb: cell \d+ of the executed notebook \('# a cell that never "
                                           r"ends'\) ran past its deadline of 5 s"):
        execute_notebook(path, tmp_path / "out.ipynb", cell_timeout_s=5)
    assert time.monotonic() - start < 60
    run = run_notebook(path, tmp_path / "course", timeout_s=5)  # make course: a row that says so, no crash
    assert run.error and "ran past its deadline of 5 s" in run.error and run.rows()[0]["holds"] is False


def test_every_command_that_executes_notebooks_has_a_cell_deadline():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert "--nbval-cell-timeout=" in pyproject, "make test's nbval run"
    matrix = (ROOT / "tests" / "matrix.py").read_text()
    assert "execute_notebook(" in matrix and "papermill.execute_notebook" not in matrix, "make test-matrix"
    release = (ROOT / "gnnbook" / "course" / "release.py").read_text()
    assert "config.Execute.timeout = int(cell_timeout_s)" in release, "autograde"
    callers = [p for p in ROOT.glob("**/*.py")
               if ".venv" not in p.parts and p.name != Path(__file__).name
               and "papermill.execute_notebook(" in p.read_text()]
    assert [p.relative_to(ROOT).as_posix() for p in callers] == ["gnnbook/course/course_run.py"], callers
