"""Lab 6's checks (gnnbook.course.grading.lab06_halo_exchange) pass the teacher's exchange and fail its mutants,
and a rank's inputs are gone before any solution code runs: a halo row can only come through the exchange."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from gnnbook.course.grading import lab06_halo_exchange as lab06
from gnnbook.course.grading.student import Here, StudentCodeError

LAB = Path(__file__).resolve().parents[1] / "labs" / "lab06_halo_exchange.ipynb"


def teacher_exchange() -> str:
    cell = next(c for c in nbformat.read(LAB, as_version=4).cells if "def halo_exchange" in c.source)
    return "".join(line + "\n" for line in cell.source.splitlines() if "###" not in line)


def student(tmp_path: Path, source: str) -> Here:
    (tmp_path / "prelude.py").write_text(lab06.PRELUDE)
    (tmp_path / "solution.py").write_text(source)
    return Here({"__solution__": (str(tmp_path / "prelude.py"), str(tmp_path / "solution.py"))})


@pytest.mark.timeout(300)
def test_the_teachers_exchange_passes_and_assignment_instead_of_addition_fails(tmp_path):
    right = teacher_exchange()
    (tmp_path / "a").mkdir()
    assert lab06.check_forward(student(tmp_path / "a", right), thorough=True)["out_error"] < 1e-5
    assert lab06.check_backward(student(tmp_path / "a", right), thorough=True)["grad_error"] < 1e-5
    # the bug of the lab's exercise 3: on two METIS parts each sent row has one peer, so only the grader's
    # three random parts see it
    wrong = right.replace("grad.index_add_(0, part.send_index, grad_rows)", "grad[part.send_index] = grad_rows")
    assert wrong != right
    (tmp_path / "b").mkdir()
    assert lab06.check_backward(student(tmp_path / "b", wrong))["grad_error"] < 1e-5
    with pytest.raises(AssertionError, match=r"3 processes, random parts: the gradient differs .* add them"):
        lab06.check_backward(student(tmp_path / "b", wrong), thorough=True)


PEEK = '''
import glob, tempfile
import torch

def halo_exchange(h, part, comm):
    files = glob.glob(tempfile.gettempdir() + "/lab06-check-*/inputs/*.pt")
    assert files, "no rank's inputs were left to read"
    return torch.zeros(len(part.halo), h.shape[1])
'''


@pytest.mark.timeout(120)
def test_no_rank_finds_another_ranks_inputs(tmp_path):
    # unvetted code, in the notebook's own process tree: the inputs are read and deleted before it runs
    with pytest.raises(StudentCodeError, match="no rank's inputs were left to read"):
        lab06.check_forward(student(tmp_path, PEEK))


def test_a_halo_of_the_wrong_shape_is_named(tmp_path):
    source = "import torch\n\ndef halo_exchange(h, part, comm):\n    return h[:1]\n"
    with pytest.raises(AssertionError, match=re.escape("return one row per node of part.halo")):
        lab06.check_forward(student(tmp_path, source))
