"""The sandboxed student process of the autograder: ``python -m gnnbook.course.grading`` in the submission's folder.

Book: none (autograding).

Used in: no notebook (:class:`gnnbook.course.grading.student.Sandboxed` starts it).

It registers every lab's calls (:mod:`.student`'s own, the multi-process labs' of :mod:`.ranks`, lab 4's of
:mod:`.training_calls`), then
:func:`~gnnbook.course.grading.student.serve` runs the prelude and the solution and answers the checks.

Example:
    >>> from gnnbook.course.grading.student import CALLS
    >>> "lab06.layer" in CALLS
    True
"""
from pathlib import Path

from . import ranks, training_calls  # noqa: F401  (register the multi-process labs' and lab 4's calls)
from .student import serve

if __name__ == "__main__":
    serve(Path.cwd())
