"""``python -m gnnbook``: see :mod:`gnnbook.cli`.

Book: none (the command line's entry point).

Used in: no notebook directly.
"""
import sys

from .cli import main

sys.exit(main())
