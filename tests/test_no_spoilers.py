"""No answer before its lab (course issue 20, item 3): students read a chapter before its lab, so a
chapter neither holds a line of a lab's solution (the code between ``### BEGIN SOLUTION`` and
``### END SOLUTION``) in any cell, nor prints (``show_source``, ``source_of``, ``inspect.getsource``)
source that holds one or that is, or contains, an implementation a lab asks students to write: a target
of :data:`gnnbook.course.labcheck.LAB_REFERENCES` (a class contains its methods, a module its functions).

Fast: the notebooks are read, not run; what a chapter prints is found by evaluating each listing's
argument among the names the chapter imports.
"""
import ast
import functools
import importlib
import inspect
import io
import json
import math
import re
import tokenize
from pathlib import Path

import pytest

from gnnbook.course.labcheck import LAB_REFERENCES

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
LABS = sorted((ROOT / "labs").glob("*.ipynb"))
SOLUTION = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.S)
LISTINGS = {"show_source", "source_of", "getsource", "getsourcelines"}   # calls that print or return source
SHORTEST = 25          # shorter solution lines (`return tensor`, `loss.backward()`) give nothing away

# Solution lines that are the course's everyday idioms, not an answer: a chapter may hold them.
IDIOMS = {
    "with PeakMemory() as peak:",             # how every measurement reads its peak (lab 11; chapter 1)
    "self.dropout = nn.Dropout(dropout)",     # any model with dropout (lab 2; chapter 2's GGNN)
}
# Answers no lab's check needs to refuse (nothing reaches them but the package's own dispatch).
MORE_ANSWERS = {"lab02_message_passing": ("gnnbook.ch7_systems.progmodels:_gcn_program",)}  # GCN as a vertex program
# References a lab's check refuses (calling them computes its answer) whose source is no answer: the
# package's models stack DGL's GraphConv, the layer lab 2 refuses, and chapter 2 shows them as such.
# Lab 8 refuses the package's partition metrics (they would compute its edge cut), but the edge cut is
# the metric chapters 4 and 6a define and print: lab 8's task is reading it back from DistDGL's
# partition files (node_map ranges, self-loops left out), which no chapter shows.
NOT_ANSWERS = {"gnnbook.models:GCN.forward", "gnnbook.models:VGAE.encode",
               "gnnbook.ch6_fullgraph.partitioners:partition_metrics", "gnnbook.training.minibatch:full_graph_boundary"}


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def normalise(text: str) -> str:
    return " ".join(text.split())


def without_comment(line: str) -> str:
    line = line.strip()
    try:
        for token in tokenize.generate_tokens(io.StringIO(line + "\n").readline):
            if token.type == tokenize.COMMENT:
                return line[:token.start[1]]
    except (tokenize.TokenError, SyntaxError):   # a line of a longer statement: its comment came first
        pass
    return line


def solution_lines(lab: Path) -> list[str]:
    """The lines of a lab's solution regions that would give its answer away, whitespace normalised."""
    lines = []
    for cell in cells(lab):
        if cell["cell_type"] == "code":
            for region in SOLUTION.findall("".join(cell["source"])):
                lines += [normalise(without_comment(line)) for line in region.splitlines()]
    return list(dict.fromkeys(line for line in lines if len(line) >= SHORTEST and line not in IDIOMS))


SOLUTIONS = {lab.stem: solution_lines(lab) for lab in LABS}


def span(obj: object) -> tuple[str, int, float] | None:
    """Where ``obj``'s source is: (file, first line, last line), a module its whole file; None for C code."""
    obj = inspect.unwrap(getattr(obj, "__func__", obj))
    try:
        where = inspect.getsourcefile(obj)
        if inspect.ismodule(obj):
            return where, 1, math.inf
        lines, first = inspect.getsourcelines(obj)
    except TypeError:                        # a built-in: it has no source to print
        return None
    return where, first, first + len(lines) - 1


@functools.cache
def answers() -> tuple[tuple[str, str, object, tuple | None], ...]:
    """(lab, target, object, span) for every implementation a lab asks students to write."""
    out = []
    for lab, targets in [*LAB_REFERENCES.items(), *MORE_ANSWERS.items()]:
        for target in targets:
            if target in NOT_ANSWERS:
                continue
            module, _, path = target.partition(":")
            try:
                obj = importlib.import_module(module)
            except ImportError:              # a library this machine lacks: no chapter can print it either
                continue
            for part in path.split("."):
                obj = getattr(obj, part)
            out.append((lab, target, obj, span(obj)))
    return tuple(out)


def root_name(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def listings(path: Path) -> list[tuple[str, str, object]]:
    """(cell id, expression, object) for every source listing in the notebook's code cells.  The object
    is the expression evaluated among the notebook's imports (and names bound to them, ``f = mod.g``);
    a listing of the notebook's own code is left out (the cell test reads it), anything else fails."""
    namespace: dict = {}
    trees = []
    for cell in cells(path):
        source = "".join(cell["source"])
        if cell["cell_type"] != "code" or source.startswith("%%"):
            continue
        lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()]
        trees.append((cell["id"], ast.parse("\n".join(lines))))
    for _, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                exec(compile(ast.Module([node], type_ignores=[]), str(path), "exec"), namespace)
    local = {node.id for _, tree in trees for node in ast.walk(tree)
             if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    local |= {node.name for _, tree in trees for node in ast.walk(tree)
              if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    for _, tree in trees:                     # aliases: f = algorithms.ring_all_reduce
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, (ast.Name, ast.Attribute)) and root_name(node.value) in namespace):
                try:
                    namespace.setdefault(node.targets[0].id, eval(ast.unparse(node.value), namespace))
                except AttributeError:
                    pass
    out = []
    for cell_id, tree in trees:
        for node in ast.walk(tree):
            func = node.func if isinstance(node, ast.Call) else None
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name not in LISTINGS or not node.args:
                continue
            expr = ast.unparse(node.args[0])
            root = root_name(node.args[0])
            if root not in namespace and root in local:
                continue
            try:
                obj = eval(expr, namespace)
            except Exception as error:       # any failure: say which listing
                pytest.fail(f"{path.name}, cell {cell_id}: cannot tell what {name}({expr}) prints ({error!r}); "
                            "list an object the notebook imports")
            out.append((cell_id, f"{name}({expr})", obj))
    return out


def cell_findings(path: Path) -> list[str]:
    return [f"{path.name}, cell {cell['id']}: holds line {line!r} of {lab}'s solution"
            for cell in cells(path) for lab, lines in SOLUTIONS.items() for line in lines
            if line in normalise("".join(cell["source"]))]


def listing_findings(path: Path) -> list[str]:
    found = []
    for cell_id, call, obj in listings(path):
        source = normalise(inspect.getsource(obj))
        found += [f"{path.name}, cell {cell_id}: {call} prints line {line!r} of {lab}'s solution"
                  for lab, lines in SOLUTIONS.items() for line in lines if line in source]
        where, first, last = span(obj)
        found += [f"{path.name}, cell {cell_id}: {call} prints {target}, which {lab} asks students to write"
                  for lab, target, ref, ref_span in answers()
                  if ref is obj or (ref_span and ref_span[0] == where and first <= ref_span[1] and ref_span[2] <= last)]
    return found


@pytest.mark.parametrize("lab", LABS, ids=lambda p: p.name)
def test_every_lab_has_solution_lines_to_look_for(lab):
    assert SOLUTIONS[lab.stem], f"{lab.name}: no solution line of {SHORTEST}+ characters found"


def test_every_lab_with_references_is_a_lab():
    assert set(LAB_REFERENCES) | set(MORE_ANSWERS) <= set(SOLUTIONS), set(LAB_REFERENCES) - set(SOLUTIONS)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_no_chapter_cell_holds_a_lab_solution(chapter):
    found = cell_findings(chapter)
    assert not found, "a chapter gives a lab's answer away:\n" + "\n".join(found)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_no_chapter_prints_a_lab_answer(chapter):
    found = listing_findings(chapter)
    assert not found, "a chapter prints a lab's answer:\n" + "\n".join(found)


def test_the_checks_find_a_spoiler(tmp_path):
    """A chapter that prints the ring all-reduce (directly and through a name), a class holding lab 6's
    exchange, a module and a solution line in a cell is caught, and each finding names lab and line."""
    ring = next(line for line in SOLUTIONS["lab03_collectives"] if "isend" in line)
    sources = ["import gnnbook.course.viz as viz\nfrom gnnbook.comm import algorithms\n"
               "from gnnbook.ch6_fullgraph import subgraph",
               "viz.show_source(algorithms.ring_all_reduce)",
               "ring = algorithms.ring_all_reduce\nviz.show_source(ring)",
               "viz.show_source(subgraph.HaloExchange)\nviz.show_source(algorithms)",
               f"def mine(comm, right):\n    {ring}"]
    notebook = {"cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "outputs": [], "execution_count": None,
                           "source": source} for i, source in enumerate(sources)]}
    path = tmp_path / "spoiler.ipynb"
    path.write_text(json.dumps(notebook))
    shown = "\n".join(listing_findings(path))
    for expected in ("c1: show_source(algorithms.ring_all_reduce) prints gnnbook.comm.algorithms:ring_all_reduce",
                     "c2: show_source(ring) prints gnnbook.comm.algorithms:ring_all_reduce, which lab03_collectives",
                     f"c1: show_source(algorithms.ring_all_reduce) prints line {ring!r} of lab03_collectives",
                     "c3: show_source(subgraph.HaloExchange) prints "
                     "gnnbook.ch6_fullgraph.subgraph:HaloExchange.forward",
                     "c3: show_source(algorithms) prints gnnbook.comm.algorithms:tree_all_reduce"):
        assert expected in shown, f"not found: {expected}\nin:\n{shown}"
    assert f"c4: holds line {ring!r} of lab03_collectives's solution" in "\n".join(cell_findings(path))
    path.write_text(json.dumps({"cells": [{"cell_type": "code", "id": "c0", "source": "show_source(nowhere.f)"}]}))
    with pytest.raises(pytest.fail.Exception, match="cannot tell what show_source"):
        listings(path)
