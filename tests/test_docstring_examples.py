"""Every module's docstring examples run and print what they say (``Example:`` sections; the ones marked
``# doctest: +SKIP`` need a dataset download or minutes of training and are shown, not run)."""
import doctest
import importlib
import pkgutil

import pytest

import gnnbook

MODULES = sorted(m.name for m in pkgutil.walk_packages(gnnbook.__path__, "gnnbook.") if not m.name.endswith("__main__"))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False, report=True)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} docstring examples failed (see above)"
