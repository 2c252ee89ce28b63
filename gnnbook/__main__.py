"""``python -m gnnbook``: see :mod:`gnnbook.cli`."""
import sys

from .cli import main

sys.exit(main())
