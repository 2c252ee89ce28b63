"""Lab 2's checks pass on the solution only: they fail on the student version
(solution regions replaced as nbgrader's release does) and on a layer that calls
the reference implementation the check compares with."""
import json
import re
from pathlib import Path

import pytest

from gnnbook.course.labcheck import ReferenceCallError

LAB = Path(__file__).resolve().parents[1] / "labs" / "lab02_message_passing.ipynb"
SOLUTION = re.compile(r"^([ \t]*)### BEGIN SOLUTION\n.*?^[ \t]*### END SOLUTION[ \t]*$", re.MULTILINE | re.DOTALL)

# A "solution" that hands the work to DGL's layer: it must not pass.
CALLS_GRAPHCONV = """\
        conv = dglnn.GraphConv(self.weight.shape[0], self.weight.shape[1], norm="both", weight=False, bias=False)
        return conv(g, h @ self.weight) + self.bias"""
CALLS_EDGE_WEIGHT_NORM = """\
        with g.local_scope():
            g.edata["w"] = dglnn.EdgeWeightNorm(norm="both")(g, torch.ones(g.num_edges()))
            g.ndata["h"] = h @ self.weight
            g.update_all(fn.u_mul_e("h", "w", "m"), fn.sum("m", "h"))
            return g.ndata["h"] + self.bias"""


def code_cells() -> list[str]:
    cells = json.loads(LAB.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def student_version(source: str) -> str:
    """What nbgrader's release (ClearSolutions, default stub) makes of a cell."""
    return SOLUTION.sub(lambda m: f"{m.group(1)}# YOUR CODE HERE\n{m.group(1)}raise NotImplementedError()", source)


def run_task1(layer_cell: str) -> dict:
    """Run setup, the given Task 1 cell and Task 1's two check cells; return the namespace."""
    cells = code_cells()
    layer_index = next(i for i, c in enumerate(cells) if "class MyGraphConv" in c)
    namespace: dict = {}
    for source in cells[:layer_index] + [layer_cell] + cells[layer_index + 1 : layer_index + 3]:
        exec(compile(source, str(LAB), "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def layer_cell() -> str:
    return next(c for c in code_cells() if "class MyGraphConv" in c)


def test_the_solution_passes_task1_checks(layer_cell):
    namespace = run_task1(layer_cell)
    assert namespace["max_abs_diff"] < 1e-5


def test_every_solution_region_is_removed_by_the_release():
    cells = code_cells()
    assert sum(len(SOLUTION.findall(c)) for c in cells) == 3, "Task 1 (forward) and Task 2 (init, forward)"
    assert all("### BEGIN SOLUTION" not in student_version(c) for c in cells)


def test_the_student_version_fails_task1_checks(layer_cell):
    with pytest.raises(NotImplementedError):
        run_task1(student_version(layer_cell))


def test_the_student_version_fails_task2_checks(layer_cell):
    cells = code_cells()
    gcn_index = next(i for i, c in enumerate(cells) if "class MyGCN" in c)
    namespace = run_task1(layer_cell)
    exec(compile(student_version(cells[gcn_index]), str(LAB), "exec"), namespace)
    with pytest.raises(NotImplementedError):
        exec(compile(cells[gcn_index + 1], str(LAB), "exec"), namespace)   # the training cell builds MyGCN


@pytest.mark.parametrize("shortcut", [CALLS_GRAPHCONV, CALLS_EDGE_WEIGHT_NORM], ids=["GraphConv", "EdgeWeightNorm"])
def test_calling_the_reference_inside_the_layer_fails_the_check(layer_cell, shortcut):
    cheating = SOLUTION.sub(lambda m: shortcut, layer_cell)
    assert cheating != layer_cell
    with pytest.raises(ReferenceCallError, match="reference implementation"):
        run_task1(cheating)
