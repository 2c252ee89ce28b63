"""The course's rule for memory checks: run them where memory is measured exactly,
and say in the output which are skipped and why where it is not."""
import sys

import pytest

from gnnbook.base import memory


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="exact peaks need Linux's VmHWM and glibc")
def test_exact_measurement_is_available_on_linux_glibc(capsys):
    assert memory.exact_memory_unavailable_reason() is None
    assert memory.exact_memory_available("the test's checks") is True
    assert capsys.readouterr().out == "", "nothing is skipped, so nothing should be printed"


def test_without_mallopt_the_checks_are_skipped_out_loud(monkeypatch, capsys):
    monkeypatch.setattr(memory, "_LIBC", None)          # a C library without mallopt (e.g. musl, macOS)
    assert memory.exact_memory_available("the Adam-state memory checks") is False
    out = capsys.readouterr().out
    assert "SKIPPED: the Adam-state memory checks" in out and "mallopt" in out, out


def test_without_a_resettable_high_water_mark_the_reason_names_it(monkeypatch, capsys):
    monkeypatch.setattr(memory, "_reset_hwm", lambda: False)   # /proc/self/clear_refs not writable
    assert "VmHWM" in memory.exact_memory_unavailable_reason()
    assert memory.exact_memory_available("the activation checks") is False
    assert "SKIPPED: the activation checks" in capsys.readouterr().out
