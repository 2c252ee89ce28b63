"""Cheating submissions for tests/test_grading.py: per lab, solutions that hand the work to a
reference implementation instead of doing it.  Each lab's cheats are in tests/cheats/<lab>.py
(a list ``CHEATS`` of :class:`Cheat`); :data:`CHEATS` gathers them by lab name.

Each cheat is the student version with the solution regions of one task filled in
(``regions``: the task's k-th solution region, counted over its cells, -> the code put there)
and, optionally, lines put at the top of a solution cell (``preamble``: the task's k-th
solution cell -> code), for a reference bound before any check runs.  Earlier tasks get the
teacher's solution (a task may build on them), later ones stay unsolved; the test refuses a
cheat whose checks fail on an unsolved task or a missing name, so a cheat that scores zero on
its task proves that task's checks refuse it.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

# How a cheat reaches the reference.  (Pasting a chapter's printed code is not among them: no chapter
# prints a lab's answer, which tests/test_no_spoilers.py checks.)
KINDS = ("direct", "early-bound", "importlib")
# How a cheat reaches around the checks themselves (issue 37); only labs graded outside the student's kernel
# (gnnbook.course.grading.engine) have them: in a kernel that runs the checks, each of them scores.
ISOLATION_KINDS = ("cell-transformer", "try-wrapper", "frame-walk", "code-copy", "emptied-refusals", "re-exec-source",
                   "patched-helper", "fake-cluster", "package-write", "hang")


# The isolation cheats' own cells, the same in every lab: one that turns every check cell into `pass`, one that
# wraps every cell in try/except BaseException (each scored full marks when the checks ran in the student's kernel).
PASS_EVERY_CHECK = ('get_ipython().input_transformers_cleanup.append(\n'
                    '    lambda lines: ["pass\\n"] if "".join(lines).lstrip().startswith("# Check") else lines)')
TRY_EVERY_CELL = ("import ast\n"
                  "class Wrap(ast.NodeTransformer):\n"
                  "    def visit_Module(self, node):\n"
                  "        handler = ast.ExceptHandler(type=ast.Name('BaseException', ast.Load()), name=None, "
                  "body=[ast.Pass()])\n"
                  "        node.body = [ast.Try(body=node.body, handlers=[handler], orelse=[], finalbody=[])]\n"
                  "        return ast.fix_missing_locations(node)\n"
                  "get_ipython().ast_transformers.append(Wrap())")
GRADING = Path(__file__).resolve().parents[1] / "gnnbook" / "course" / "grading"


def write_into_grader(lab: str) -> str:
    """A line that overwrites the lab's grading module (numpy's savetxt: no `open`, which the vetting refuses)."""
    return f"import numpy as np\nnp.savetxt({str(GRADING / (lab + '.py'))!r}, np.zeros(1))"


@dataclass(frozen=True)
class Cheat:
    name: str                     # what the cheat does, in a few words
    kind: str                     # one of KINDS: how the reference is reached
    task: int                     # the task it targets: it must score zero there
    regions: dict[int, str]       # k-th solution region of the task -> replacement code
    preamble: dict[int, str] = field(default_factory=dict)   # k-th solution cell of the task -> code at its top
    cell: str = ""                # a cell of the cheat's own, put before the first solution cell
    expect: str = ""              # what the grade table's reason for the task must say

    def __post_init__(self):
        assert self.kind in KINDS + ISOLATION_KINDS, (f"{self.name}: kind {self.kind!r} is not one of "
                                                      f"{KINDS + ISOLATION_KINDS}")


def _load(path: Path) -> list[Cheat]:
    spec = importlib.util.spec_from_file_location(f"cheats_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.CHEATS)


CHEATS: dict[str, list[Cheat]] = {path.stem: _load(path)
                                  for path in sorted((Path(__file__).parent / "cheats").glob("lab*.py"))}


def for_make_test(lab: str) -> list[Cheat]:
    """What `make test` grades of ``lab``'s cheats: one of each reference kind (spread over the tasks), and of each
    isolation kind one cheat in the whole course, the first lab's that has one (the isolation does not depend on the
    lab; `make test-cheats` grades every cheat of every lab)."""
    owner = {kind: next(name for name in sorted(CHEATS) if any(c.kind == kind for c in CHEATS[name]))
             for kind in ISOLATION_KINDS if any(c.kind == kind for cheats in CHEATS.values() for c in cheats)}
    return [c for c in one_of_each_kind(CHEATS[lab]) if c.kind in KINDS or owner.get(c.kind) == lab]


def one_of_each_kind(cheats: list[Cheat]) -> list[Cheat]:
    """One cheat of every kind for the lab (what `make test` runs; `make test-cheats` runs all),
    spread over the lab's tasks: each kind takes a cheat of the task the fewest picks cover yet."""
    picked: list[Cheat] = []
    for kind in KINDS + ISOLATION_KINDS:
        of_kind = [c for c in cheats if c.kind == kind]
        if of_kind:
            picked.append(min(of_kind, key=lambda c: sum(p.task == c.task for p in picked)))
    return picked
