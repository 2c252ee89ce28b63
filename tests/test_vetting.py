"""The solution vetting of the grader (gnnbook.course.vetting): every construct that only reaches around a
check is refused with its line, however it is spelled, and the labs' own solutions pass untouched."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from gnnbook.course.grading.engine import grading_module, solution_cells, teacher_grade_ids
from gnnbook.course.release import annotate, default_labs
from gnnbook.course.vetting import Policy, vet

ROOT = Path(__file__).resolve().parents[1]
POLICY = Policy(modules=("torch", "dgl", "math"), references=("GraphConv",))

REFUSED = {
    "import sys": "import of 'sys'",
    "from gnnbook.ch7_systems import progmodels": "import from 'gnnbook.ch7_systems'",
    "import dgl.nn as dglnn": "import of 'dgl.nn'",
    "x = dgl.nn.pytorch": "'dgl.nn",
    "f = GraphConv": "'GraphConv', the reference",
    "exec('1')": "the built-in 'exec'",
    "y = getattr(dgl, 'n' + 'n')": "the built-in 'getattr'",
    "z = open('/etc/passwd')": "the built-in 'open'",
    "code = f.__code__": "the attribute '__code__'",
    "frame = torch._C": "the attribute '_C'",
    "b = __builtins__": "the built-in '__builtins__'",
    "s = __spec__": "the name '__spec__'",
    "torch.allclose = lambda *a: True": "assignment to 'torch.allclose'",
    "del dgl.function": "assignment to 'dgl.function'",
    "def f():\n    global x": "a global or nonlocal statement",
    "from torch.utils.cpp_extension import load_inline": "import from 'torch.utils.cpp_extension'",
    "import math as m\nm.pi = 3": "assignment to 'm.pi'",
    "def broken(:": "a syntax error",
    "self = torch\nself.load = 1": "assignment to 'self.load'",                       # not a method's self
    "def forward(ctx, h):\n    ctx = torch\n    ctx.load = 1": "assignment to 'ctx.load'",   # ctx rebound
    "def forward(h, ctx):\n    ctx.rows = 1": "assignment to 'ctx.rows'",                # not the first parameter
}


@pytest.mark.parametrize("source", list(REFUSED))
def test_a_construct_that_reaches_around_a_check_is_refused_with_its_line(source):
    refusals = vet(source, POLICY)
    assert refusals, f"{source!r} passed"
    assert REFUSED[source] in refusals[0].what, refusals[0]
    assert refusals[0].line == source.count("\n") + 1 or "syntax" in refusals[0].what


def test_what_a_solution_needs_passes():
    assert vet("import torch\nimport dgl.function as fn\nclass L(torch.nn.Module):\n"
               "    def __init__(self):\n        super().__init__()\n"
               "        self.w = torch.nn.Parameter(torch.ones(2))\n"
               "    def forward(self, g, h):\n        g.ndata['h'] = h\n"
               "        g.update_all(fn.copy_u('h', 'm'), fn.sum('m', 'h'))\n"
               "        return g.ndata['h'] * math.sqrt(2)\nfor _ in range(2):\n    _x = 1\n", POLICY) == []


def test_an_autograd_function_may_keep_its_state_on_ctx():
    assert vet("import torch\nclass Exchange(torch.autograd.Function):\n    @staticmethod\n"
               "    def forward(ctx, h, part):\n        ctx.part, ctx.rows = part, h.shape[0]\n        return h\n"
               "    @staticmethod\n    def backward(ctx, grad):\n        return grad[:ctx.rows], None\n", POLICY) == []


@pytest.mark.parametrize("lab", [lab for lab in default_labs(ROOT) if grading_module(lab.stem) is not None],
                         ids=lambda lab: lab.stem)
def test_the_teachers_solutions_pass_their_labs_vetting(lab):
    ids, _ = teacher_grade_ids(lab)
    cells = solution_cells(annotate(nbformat.read(lab, as_version=4), lab.name), ids)
    for grade_id, source in cells:
        assert source.strip(), f"{lab.stem}: {grade_id} is empty"
        assert vet(source, grading_module(lab.stem).POLICY) == [], f"{lab.stem}: {grade_id}"
