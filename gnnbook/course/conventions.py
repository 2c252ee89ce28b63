"""The two conventions that make a lab notebook gradable, read into nbgrader metadata.

Book: none (classroom release and autograding).

Used in: no notebook directly (``release`` releases and grades with it; ``grading.engine`` finds solution cells).

- a code cell with ``### BEGIN SOLUTION`` / ``### END SOLUTION`` is a *solution* cell (the release
  replaces the region by ``raise NotImplementedError()``);
- a code cell whose source starts with ``# Check`` is a *graded*, locked cell worth
  :data:`POINTS_PER_CHECK` points.

Cells belong to the task of the last ``Task N`` heading above them (task 1 when a lab has no such
heading); grade ids are ``task<N>-solution<k>`` and ``task<N>-check<k>``.

Example:
    >>> import nbformat
    >>> nb = nbformat.v4.new_notebook(cells=[
    ...     nbformat.v4.new_markdown_cell("## Task 1 · add"),
    ...     nbformat.v4.new_code_cell("def add(a, b):\\n    ### BEGIN SOLUTION\\n    return a + b\\n"
    ...                               "    ### END SOLUTION"),
    ...     nbformat.v4.new_code_cell("# Check: add works\\nassert add(2, 3) == 5")])
    >>> [c.metadata.nbgrader["grade_id"] for c in annotate(nb, "demo").cells[1:]]
    ['task1-solution1', 'task1-check1']
"""
from __future__ import annotations

import re
from collections import defaultdict

import nbformat

BEGIN_SOLUTION = "### BEGIN SOLUTION"
END_SOLUTION = "### END SOLUTION"
CHECK_PREFIX = "# Check"
POINTS_PER_CHECK = 1
TASK_HEADING = re.compile(r"^#+\s.*?\bTask\s+(\d+)", re.MULTILINE)
_SOLUTION_REGION = re.compile(rf"^([ \t]*){BEGIN_SOLUTION}\n.*?^[ \t]*{END_SOLUTION}[ \t]*$", re.S | re.M)


class ReleaseError(Exception):
    """A lab or a submission that cannot be released or graded; the message says why and what to do."""


def annotate(nb: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """Give ``nb``'s solution and check cells nbgrader metadata, in place; returns ``nb``.

    Any nbgrader metadata already in a cell is replaced, so the conventions
    above are the only source of truth.  Raises :class:`ReleaseError` when a
    task has a solution but no check cell (the student could not be graded).
    """
    task, counters, solved, checked = 1, defaultdict(int), set(), set()
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
        if cell.cell_type != "code":
            cell.source = _quote_markers(cell.source)
        if cell.cell_type == "markdown":
            heading = TASK_HEADING.search(cell.source)
            task = int(heading.group(1)) if heading else task
            continue
        if cell.cell_type != "code":
            continue
        if BEGIN_SOLUTION in cell.source:
            kind, flags = "solution", dict(solution=True, grade=False, locked=False)
            solved.add(task)
        elif cell.source.lstrip().startswith(CHECK_PREFIX):
            kind, flags = "check", dict(solution=False, grade=True, locked=True, points=POINTS_PER_CHECK)
            checked.add(task)
        else:
            continue
        counters[task, kind] += 1
        cell.metadata["nbgrader"] = dict(schema_version=3, task=False,
                                         grade_id=f"task{task}-{kind}{counters[task, kind]}", **flags)
    if not solved:
        raise ReleaseError(f"{name}: no code cell has a '{BEGIN_SOLUTION}' region; mark the solution "
                           "code between '### BEGIN SOLUTION' and '### END SOLUTION'.")
    if solved - checked:
        raise ReleaseError(f"{name}: task(s) {sorted(solved - checked)} have a solution but no graded cell; "
                           f"start the cell that checks them with '{CHECK_PREFIX}'.")
    return nb


def _quote_markers(text: str) -> str:
    # nbgrader clears a marker region in any cell, prose included; the labs' text names
    # the markers, so there they get a no-break space, which reads the same.
    for marker in (BEGIN_SOLUTION, END_SOLUTION):
        text = text.replace(marker, marker.replace(" SOLUTION", "\u00a0SOLUTION"))
    return text


def as_released(source: str) -> str:
    """``source`` as the release gives it to students: each solution region replaced by nbgrader's stub.

    Example:
        >>> as_released("def add(a, b):\\n    ### BEGIN SOLUTION\\n    return a + b\\n    ### END SOLUTION")
        'def add(a, b):\\n    # YOUR CODE HERE\\n    raise NotImplementedError()'
    """
    return _SOLUTION_REGION.sub(lambda m: f"{m.group(1)}# YOUR CODE HERE\n{m.group(1)}raise NotImplementedError()",
                                source)


def is_annotated(nb: nbformat.NotebookNode) -> bool:
    """Whether any cell already carries nbgrader metadata (a released, then submitted, notebook)."""
    return any("nbgrader" in cell.metadata for cell in nb.cells)
