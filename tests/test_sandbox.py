"""The grader's sandbox (gnnbook.course.sandbox), tried as a hostile submission would: a hang that ignores
SIGINT and SIGTERM, a fork bomb, a write into the package and into /tmp, a connection to the host's
loopback, a memory blow-up.  Each is stopped or contained, says why, and leaves nothing behind."""
from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from gnnbook.course.sandbox import Limits, closed_folder, is_privileged, run_sandboxed, sandbox_warning

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(sandbox_warning() is not None and not is_privileged(),
                                reason="the sandbox drops to 'nobody' only as root")


def sandboxed(tmp_path, code: str, **limits):
    return run_sandboxed([sys.executable, "-c", textwrap.dedent(code)], tmp_path / "work", limits=Limits(**limits))


def still_running(marker: str) -> list[str]:
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    return out.split()


def test_a_hang_that_ignores_sigint_and_sigterm_is_killed_at_the_deadline_with_everything_it_started(tmp_path):
    marker = f"hang-{uuid.uuid4().hex}"
    result = sandboxed(tmp_path, f"""
        import signal, subprocess, time
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)
        child = subprocess.Popen(["sleep", "1000"], start_new_session=True)   # {marker}: a grandchild too
        print("started", flush=True)
        time.sleep(1000)
    """, deadline_s=4)
    assert result.returncode is None and "deadline of 4 s" in result.reason, result
    assert "started" in result.output
    assert result.seconds < 20
    assert not still_running(marker), "a process of the sandbox outlived it"


def test_a_fork_bomb_meets_the_process_limit_and_leaves_nothing(tmp_path):
    marker = f"bomb-{uuid.uuid4().hex}"
    result = sandboxed(tmp_path, f"""
        import os, time
        made = 0
        try:
            for _ in range(2000):
                if os.fork() == 0:
                    time.sleep(1000)     # {marker}
                    os._exit(0)
                made += 1
        except OSError as error:
            print("refused after", made, type(error).__name__, flush=True)
        time.sleep(1000)
    """, deadline_s=8, processes=64)
    assert "refused after" in result.output, result.output
    made = int(result.output.split("refused after")[1].split()[0])
    assert made < 64, made
    assert not still_running(marker)


def test_writes_outside_the_work_folder_fail_and_tmp_is_private(tmp_path):
    target = ROOT / "gnnbook" / "course" / "grading" / "__init__.py"
    before = target.read_bytes()
    name = f"/tmp/sandbox-{uuid.uuid4().hex}"
    result = sandboxed(tmp_path, f"""
        open({name!r}, "w").write("private")
        open("mine.txt", "w").write("allowed")
        print("tmp and work folder written", flush=True)
        open({str(target)!r}, "a").write("# graded by me")
    """, deadline_s=30)
    assert "tmp and work folder written" in result.output
    assert "PermissionError" in result.output and result.returncode == 1, result
    assert target.read_bytes() == before
    assert not Path(name).exists(), "the sandbox's /tmp is its own"
    assert (tmp_path / "work" / "mine.txt").read_text() == "allowed"


def test_the_hosts_loopback_is_out_of_reach(tmp_path):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        result = sandboxed(tmp_path, f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=3)
                print("connected")
            except OSError as error:
                print("refused:", type(error).__name__)
            with socket.socket() as own:          # its own loopback works
                own.bind(("127.0.0.1", 0)); own.listen()
                socket.create_connection(own.getsockname(), timeout=3).close()
                print("own loopback ok")
        """, deadline_s=30)
    assert "refused: ConnectionRefusedError" in result.output and "own loopback ok" in result.output, result.output


def test_a_memory_blow_up_stops_with_the_reason(tmp_path):
    result = sandboxed(tmp_path, "block = bytearray(8 << 30)", deadline_s=30, memory_bytes=1 << 30)
    assert result.returncode == 1 and "memory" in result.reason, result


def test_the_interpreter_runs_from_a_closed_home_and_the_rest_of_it_stays_unseen(tmp_path):
    """pyenv installs Python in root's home (0700): the sandbox opens only the way to the interpreter."""
    closed, needed = closed_folder(sys.executable)
    if not closed:
        pytest.skip("this Python's folders are open to every user")
    secret = Path(closed) / f"sandbox-secret-{uuid.uuid4().hex}"
    secret.write_text("the grader's")
    try:
        result = sandboxed(tmp_path, f"""
            import os, sys
            print(sorted(os.listdir({closed!r})), os.path.exists({str(secret)!r}), sys.version.split()[0])
        """, deadline_s=60)
    finally:
        secret.unlink()
    assert result.returncode == 0, result
    assert result.output.startswith(str([Path(needed).name])) and " False " in result.output, result.output
    assert sys.version.split()[0] in result.output, ("the sandbox runs the grader's own Python "
                                                     "(and its standard library)")
