"""gnnbook.procs: fail fast, deadline, nothing left behind."""
import sys
import time

import psutil
import pytest

from gnnbook.procs import ProcessFailed, ProcessGroup

PY = sys.executable


def _descendants() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_success_returns_exit_codes(tmp_path):
    with ProcessGroup(deadline_s=30, log_dir=tmp_path) as group:
        group.start("a", [PY, "-c", "print('hello from a')"])
        group.start("b", [PY, "-c", "print('hello from b')"])
        assert group.wait() == {"a": 0, "b": 0}
        assert "hello from a" in group.log("a")


def test_first_failure_kills_the_group_and_names_the_process():
    start = time.monotonic()
    with pytest.raises(ProcessFailed) as info:
        with ProcessGroup(deadline_s=60) as group:
            group.start("server", [PY, "-c", "import time; time.sleep(600)"], background=True)
            group.start("trainer-0", [PY, "-c", "import time; time.sleep(600)"])
            group.start("trainer-1", [PY, "-c", "import sys, time; time.sleep(0.5); print('boom'); sys.exit(3)"])
            group.wait()
    assert time.monotonic() - start < 15
    assert info.value.name == "trainer-1" and info.value.returncode == 3
    assert "boom" in str(info.value) and "trainer-1" in str(info.value)
    assert not _descendants()


def test_a_killed_process_is_reported_by_signal():
    with pytest.raises(ProcessFailed, match="killed by SIGKILL"):
        with ProcessGroup(deadline_s=60) as group:
            victim = group.start("victim", [PY, "-c", "import time; time.sleep(600)"])
            time.sleep(0.3)
            victim.kill()
            group.wait()
    assert not _descendants()


def test_deadline_stops_a_hang_and_its_grandchildren():
    script = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"
    start = time.monotonic()
    with pytest.raises(ProcessFailed, match="deadline of 2 s passed; still running: hang"):
        with ProcessGroup(deadline_s=2) as group:
            group.start("hang", [PY, "-c", script])
            group.wait()
    assert time.monotonic() - start < 10
    time.sleep(0.2)
    assert not _descendants(), "the grandchild in the same session is killed too"


def test_background_servers_get_stopped_after_foreground_finishes():
    with ProcessGroup(deadline_s=30, grace_s=0.5) as group:
        group.start("server", [PY, "-c", "import time; time.sleep(600)"], background=True)
        group.start("client", [PY, "-c", "pass"])
        codes = group.wait()
    assert codes["client"] == 0 and codes["server"] != 0
    assert not _descendants()
