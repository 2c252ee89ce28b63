"""Every notebook follows the course template and is committed without outputs."""
import json
import re
from pathlib import Path

import pytest

from gnnbook.course.site import ANSWERS_TAG

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb")) + sorted((ROOT / "labs").glob("*.ipynb"))


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 3


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_template(path):
    nb = json.loads(path.read_text())
    cells = nb["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code), \
        f"{path.name} has stored outputs: run `make strip-notebooks`"
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    title = "".join(cells[0]["source"])
    assert cells[0]["cell_type"] == "markdown" and title.startswith("# "), "first cell: the title"
    assert re.search(r"[\u4e00-\u9fff]", title.splitlines()[0]), "the title carries the book's original title"
    assert any("parameters" in c.get("metadata", {}).get("tags", []) for c in code), "a papermill parameters cell"
    sources = "\n".join("".join(c["source"]) for c in code)
    assert "assert " in sources, "claims are asserted in cells"
    if path.parent.name == "labs":
        assert "### BEGIN SOLUTION" in sources and "### END SOLUTION" in sources


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_papermill_sees_every_parameter(path):
    """papermill silently drops a line it cannot parse (an '=' in the comment, a tuple assignment),
    so a teacher's `-p name value` would then be 'unknown'; every assigned name must be a parameter."""
    from papermill.translators import PythonTranslator

    cell = next(c for c in json.loads(path.read_text())["cells"]
                if "parameters" in c.get("metadata", {}).get("tags", []))
    source = "".join(cell["source"])
    assigned = re.findall(r"^([A-Za-z_]\w*)\s*(?::[^=]+)?=(?!=)", source, flags=re.MULTILINE)
    seen = {p.name for p in PythonTranslator.inspect({"source": source})}
    missing = [name for name in assigned if name not in seen]
    assert not missing, f"{path.name}: papermill cannot parse the parameter lines of {missing} " \
                        "(one name per line; no '=' inside the comment)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_exercise_answers_are_folded_after_their_exercises(path):
    """A chapter's answers (a markdown cell tagged ``answers``, gnnbook.course.site.ANSWERS_TAG) come right after
    its "## Exercises" cell, folded in <details> so that Jupyter shows them closed, and answer each exercise."""
    cells = json.loads(path.read_text())["cells"]
    for i, cell in enumerate(cells):
        if ANSWERS_TAG not in cell.get("metadata", {}).get("tags", []):
            continue
        text, before = "".join(cell["source"]), "".join(cells[i - 1]["source"])
        assert cell["cell_type"] == "markdown" and before.startswith("## Exercises"), f"{path.name}, cell {i}"
        assert (text.startswith("<details>\n<summary>")
                and text.rstrip().endswith("</details>")), f"{path.name}, cell {i}"
        asked = re.findall(r"^(\d+)\. ", before, re.M)
        answered = re.findall(r"^(\d+)\. ", text, re.M)
        assert answered == asked, f"{path.name}: exercises {asked}, answers {answered}"


def _is_text(node) -> bool:
    """A message that reads as words: a string, an f-string, or strings joined with + or %."""
    import ast

    return (isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))
            or (isinstance(node, ast.BinOp) and (_is_text(node.left) or _is_text(node.right))))


@pytest.mark.parametrize("path", sorted((ROOT / "chapters").glob("*.ipynb")), ids=lambda p: p.name)
def test_every_assert_in_a_chapter_says_what_failed(path):
    """A claim or check that fails tells the student what was compared (issue 45): every `assert` has a message,
    and the message is text (a string or f-string), never a bare tuple, dict or number.  (Labs are left out: their
    check cells call the grading module, whose checks carry their own messages.)"""
    import ast

    bad = []
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        source = "".join(cell["source"]) if cell["cell_type"] == "code" else ""
        source = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Assert) and (node.msg is None or not _is_text(node.msg)):
                what = "no message" if node.msg is None else f"message {ast.get_source_segment(source, node.msg)[:40]}"
                bad.append(f"cell {i}, line {node.lineno} ({what}): {ast.get_source_segment(source, node.test)[:60]}")
    assert not bad, f"{path.name}: asserts that do not say what failed (write what was compared and the numbers): {bad}"
