"""The one base class of the errors a user's input causes (every layer; the command line prints them).

Book: none (clear errors for every command).

Used in: no notebook directly.

A command that meets bad input (an unknown dataset, too many partitions, a missing file)
raises :class:`UserError` with a message that names the problem and the fix;
``python -m gnnbook`` prints that message as one paragraph, without a traceback, and exits 2.
It lives at the bottom of the package so that any layer can raise it without importing the
command line.

Example:
    >>> try:
    ...     raise UserError("unknown dataset 'kora'. Known datasets: cora, citeseer.")
    ... except UserError as exc:
    ...     str(exc)
    "unknown dataset 'kora'. Known datasets: cora, citeseer."
"""
from __future__ import annotations

__all__ = ["UserError"]


class UserError(Exception):
    """An error caused by the input; printed as one paragraph, no traceback."""
