"""The package's own map: its folders in layer order, each module with its docstring's first line.

Book: none (the course's map of where each book section lives in the package).

Used in: no notebook directly.

The layers are the ones ``make lint`` enforces (import-linter's layers contract in
``pyproject.toml``); :func:`tree` prints them lowest first, so the listing reads as the book does:
base, data, graph basics, models, training, communication, chapters 3, 5, 6 and 7, the runtime,
the applications and the course.

Example:
    >>> print(tree().splitlines()[0])                     # doctest: +ELLIPSIS
    base/  The base: processes, their watchdog, ...
"""
from __future__ import annotations

import ast
import tomllib
from pathlib import Path

__all__ = ["layers", "tree"]

PACKAGE = Path(__file__).resolve().parents[1]


def layers(pyproject: Path = PACKAGE.parent / "pyproject.toml") -> list[str]:
    """The package's layers, highest first, as the import contract lists them."""
    contracts = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]["contracts"]
    return next(c["layers"] for c in contracts if c["type"] == "layers")


def _summary(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(doc.split("\n\n")[0].split())


def tree(width: int = 160) -> str:
    """Every folder and module of ``gnnbook``, lowest layer first, with its docstring's first line."""
    lines = []
    for layer in reversed(layers()):
        folder = PACKAGE / layer
        if not folder.is_dir():
            lines.append(f"{layer}.py  {_summary(PACKAGE / (layer + '.py'))}")
            continue
        lines.append(f"{layer}/  {_summary(folder / '__init__.py')}")
        for module in sorted(folder.rglob("*.py")):
            if "_site" in module.parts or module == folder / "__init__.py":
                continue
            rel = module.relative_to(folder)
            name = f"{rel.parent}/" if module.name == "__init__.py" else rel.as_posix()
            lines.append(f"    {name:<30} {_summary(module)}")
    return "\n".join(line if len(line) <= width else line[: width - 3] + "..." for line in lines)
