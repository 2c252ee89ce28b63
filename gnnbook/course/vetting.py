"""Read a lab solution before it runs: what it may import and call, and the constructs that only reach around a check.

Book: none (autograding).

Used in: no notebook directly (``gnnbook.course.grading.engine`` vets every submission).

A lab's solution is a few functions or classes built from tensors, DGL's message passing and a
communicator.  :func:`vet` parses the solution cells and refuses, naming the line:

- an ``import`` of a module that is not on the lab's allow-list (``gnnbook`` itself is never on
  it: the package holds the lab's references; nor are ``sys``, ``os``, ``importlib``, ``inspect``,
  ``gc``, ``ctypes``, ``types``, ``pickle``, ``subprocess``, ``signal``, ``builtins``, ``IPython``);
- a dotted name inside a refused part of an allowed library (``dgl.nn``, ``torch.utils``,
  ``torch_geometric``, ...), and the lab's reference classes and functions by name
  (``GraphConv``, ``GCNConv``, ...);
- the built-ins that run or reach code by name (``exec``, ``eval``, ``compile``, ``__import__``,
  ``getattr``/``setattr``/``delattr``, ``globals``/``locals``/``vars``, ``get_ipython``,
  ``breakpoint``, ``open``, ``input``);
- any attribute that starts with an underscore (``sys._getframe``, ``f.__code__``, ``obj.__dict__``,
  ``torch._C``) and any name that starts with two (``__builtins__``), ``__init__`` and ``__name__`` aside
  (``for _ in ...`` is fine);
- an assignment to an attribute of anything but a method's ``self`` or an autograd function's ``ctx``
  (``torch.allclose = ...``, ``F.relu = ...``).

An allow-list, not a list of known tricks: what a solution needs is short, and anything else is
named so that a student who needed it can ask.

Example:
    >>> policy = Policy(modules=("torch", "math"), references=("GraphConv",))
    >>> [r.line for r in vet("import torch\\nx = torch.ones(2)\\nimport sys\\ny = sys._getframe(1)", policy)]
    [3, 4]
    >>> vet("torch.allclose = lambda *a: True", policy)[0].what
    "assignment to 'torch.allclose' (only attributes of a method's self, or an autograd function's ctx, may be set)"
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

# Built-ins that run code given as text, or reach objects by name (around every check).
REFUSED_BUILTINS = frozenset({"exec", "eval", "compile", "__import__", "getattr", "setattr", "delattr", "globals",
                              "locals", "vars", "get_ipython", "breakpoint", "open", "input", "memoryview",
                              "__builtins__", "exit", "quit"})
# Parts of allowed libraries that hold ready-made layers, or load and run code.
REFUSED_PREFIXES = ("dgl.nn", "dgl.utils", "dgl.distributed", "dgl.data", "dgl.multiprocessing", "torch.utils",
                    "torch.hub", "torch.library", "torch.ops", "torch.classes", "torch.jit", "torch.package",
                    "torch.multiprocessing", "torch.distributed", "torch.cuda", "torch.backends", "torch.testing",
                    "torch_geometric", "gnnbook")
ALLOWED_DUNDERS = frozenset({"__init__", "__name__"})


@dataclass(frozen=True)
class Policy:
    """What one lab's solution may use: ``modules`` it may import (a module allows its submodules, but
    for :data:`REFUSED_PREFIXES`), and ``references``, the names of the lab's reference classes and
    functions, refused wherever they appear."""

    modules: tuple[str, ...]
    references: tuple[str, ...] = ()


@dataclass(frozen=True)
class Refusal:
    line: int            # in the vetted source, from 1
    what: str            # the construct, in words
    code: str            # the line itself

    def __str__(self) -> str:
        return f"line {self.line}: {self.what}: {self.code.strip()[:120]}"


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for an attribute chain rooted at a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _allowed_module(name: str, policy: Policy) -> bool:
    if any(name == p or name.startswith(p + ".") for p in REFUSED_PREFIXES):
        return False
    return any(name == m or name.startswith(m + ".") for m in policy.modules)


SETTABLE = ("self", "ctx")     # the first parameter of a method, or of an autograd Function's forward/backward


def _settable_stores(tree: ast.AST) -> set[int]:
    """The attribute stores on a function's own first parameter when it is named ``self`` or ``ctx`` and the
    function never rebinds that name (``ctx = torch`` would make ``ctx.load = ...`` a patch of torch)."""
    allowed: set[int] = set()
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or not function.args.args:
            continue
        first = function.args.args[0].arg
        body = [node for statement in function.body for node in ast.walk(statement)]
        if first not in SETTABLE or any(isinstance(n, ast.Name) and n.id == first and not isinstance(n.ctx, ast.Load)
                                        for n in body):
            continue
        for node in body:
            if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load) and \
                    (_dotted(node) or "").split(".")[0] == first:
                allowed.add(id(node))
    return allowed


def vet(source: str, policy: Policy) -> list[Refusal]:
    """Every refused construct of ``source`` (solution code), in line order; [] for a clean solution.
    A syntax error is one refusal (the code could not be read, so nothing of it is run)."""
    lines = source.splitlines()
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        return [Refusal(error.lineno or 0, f"a syntax error ({error.msg})", error.text or "")]
    found: dict[int, Refusal] = {}      # the first refused construct of each line
    aliases: dict[str, str] = {}        # local name -> the module it names

    def refuse(node: ast.AST, what: str) -> None:
        line = getattr(node, "lineno", 0)
        found.setdefault(line, Refusal(line, what, lines[line - 1] if 0 < line <= len(lines) else ""))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not _allowed_module(alias.name, policy):
                    refuse(node, f"import of {alias.name!r} (not among this lab's modules: "
                                 f"{', '.join(policy.modules)})")
                aliases[alias.asname or alias.name.split(".")[0]] = (alias.name if alias.asname
                                                                     else alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            if node.level or not _allowed_module(module, policy):
                refuse(node, f"import from {module!r} (not among this lab's modules: {', '.join(policy.modules)})")
            for alias in node.names:
                full = f"{module}.{alias.name}"
                if alias.name == "*" or alias.name in policy.references or any(
                        full == p or full.startswith(p + ".") for p in REFUSED_PREFIXES):
                    refuse(node, f"import of {full!r}")
                aliases[alias.asname or alias.name] = full
    settable = _settable_stores(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if node.id in REFUSED_BUILTINS:
                refuse(node, f"the built-in {node.id!r}")
            elif node.id.startswith("__") and node.id not in ALLOWED_DUNDERS:
                refuse(node, f"the name {node.id!r} (names starting with '__' reach around the checks)")
            elif node.id in policy.references:
                refuse(node, f"{node.id!r}, the reference this lab's checks compare with")
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("_") and node.attr not in ALLOWED_DUNDERS:
                refuse(node, f"the attribute {node.attr!r} (attributes starting with '_' reach around the checks)")
            elif node.attr in policy.references:
                refuse(node, f"{node.attr!r}, the reference this lab's checks compare with")
            dotted = _dotted(node)
            if dotted is not None:
                root, _, rest = dotted.partition(".")
                full = aliases.get(root, root) + ("." + rest if rest else "")
                prefix = next((p for p in REFUSED_PREFIXES if full == p or full.startswith(p + ".")), None)
                if prefix is not None:
                    refuse(node, f"{dotted!r} (in {prefix!r}, which lab solutions may not use)")
            if isinstance(node.ctx, (ast.Store, ast.Del)) and id(node) not in settable:
                target = _dotted(node)
                refuse(node, f"assignment to {target or 'an attribute'!r} (only attributes of a method's self, or "
                             f"an autograd function's ctx, may be set)")
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            refuse(node, "a global or nonlocal statement")
    return [found[line] for line in sorted(found)]
