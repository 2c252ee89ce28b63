"""Supervise a group of OS processes: fail fast, a deadline, nothing left behind.

Every multi-process run in the course (torch.distributed workers, DistDGL
servers and trainers) goes through :class:`ProcessGroup`.  Each process gets
its own session (process group) and log file.  The group is watched; the first
process that exits non-zero or dies by a signal makes the whole group be
killed, and :class:`ProcessFailed` names it and shows the tail of its log.
A global deadline does the same for a hang.  Leaving the ``with`` block always
kills whatever is still running.

Example:
    >>> import sys
    >>> with ProcessGroup(deadline_s=30) as group:
    ...     group.start("hello", [sys.executable, "-c", "print('hi')"])
    ...     codes = group.wait()
    >>> codes
    {'hello': 0}
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


class ProcessFailed(RuntimeError):
    """A process of the group failed (or the deadline passed)."""

    def __init__(self, name: str, returncode: int | None, log_tail: str, reason: str):
        self.name, self.returncode, self.log_tail = name, returncode, log_tail
        super().__init__(f"{reason}\n--- last lines of {name}'s log ---\n{log_tail}")


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


@dataclass
class _Member:
    name: str
    popen: subprocess.Popen
    log_path: Path
    background: bool  # a server: may run until the others finish
    exited_at: float | None = None  # set by a watcher thread the moment the process exits

    def watch(self) -> None:
        self.popen.wait()
        self.exited_at = time.monotonic()


def _die_with_parent() -> None:
    """In the child before exec (Linux): be killed when the supervising process
    dies, even by SIGKILL, so a killed notebook kernel leaves no orphans."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class ProcessGroup:
    """Start processes with :meth:`start`, then :meth:`wait` for them.

    ``background=True`` marks a process (a server) that is expected to run
    until the foreground processes finish; it is then given ``grace_s`` to
    exit by itself before it is stopped.  With ``background_exit_grace_s``
    set, a background process that exits (even with code 0) while foreground
    processes still run fails the job unless they all finish within that many
    seconds: a server that quit early leaves its clients waiting forever.
    """

    def __init__(self, deadline_s: float, log_dir: str | Path | None = None, poll_s: float = 0.05,
                 grace_s: float = 10.0, on_cleanup: Callable[[], None] | None = None,
                 background_exit_grace_s: float | None = None):
        self.deadline = time.monotonic() + deadline_s
        self.deadline_s = deadline_s
        self.log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="gnnbook-job-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.poll_s, self.grace_s = poll_s, grace_s
        self.members: list[_Member] = []
        self.on_cleanup = on_cleanup
        self.background_exit_grace_s = background_exit_grace_s
        self._background_exit: tuple[float, _Member] | None = None

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None,
              cwd: str | Path | None = None, background: bool = False) -> subprocess.Popen:
        log_path = self.log_dir / f"{name}.log"
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(
                argv, env={**os.environ, **(env or {})}, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        member = _Member(name, popen, log_path, background)
        # A thread per process records when it exits: when one failure makes
        # the others fail too (a peer's connection closes), the first is named.
        threading.Thread(target=member.watch, daemon=True).start()
        self.members.append(member)
        return popen

    def log(self, name: str) -> str:
        return next(m.log_path for m in self.members if m.name == name).read_text(errors="replace")

    def _check_failures(self) -> None:
        failed = [m for m in self.members if m.exited_at is not None and m.popen.returncode != 0]
        if failed:
            m = min(failed, key=lambda member: member.exited_at)
            code = m.popen.returncode
            self.kill()
            raise ProcessFailed(m.name, code, tail(m.log_path), f"process '{m.name}' {describe_exit(code)}; the job was stopped")
        if self.background_exit_grace_s is None:
            return
        if any(m.popen.poll() is None for m in self.members if not m.background):
            if self._background_exit is None:
                early = next((m for m in self.members if m.background and m.popen.poll() is not None), None)
                if early is not None:
                    self._background_exit = (time.monotonic(), early)
            elif time.monotonic() - self._background_exit[0] > self.background_exit_grace_s:
                m = self._background_exit[1]
                running = [r.name for r in self.members if not r.background and r.popen.poll() is None]
                self.kill()
                raise ProcessFailed(m.name, m.popen.returncode, tail(m.log_path),
                                    f"process '{m.name}' {describe_exit(m.popen.returncode)} while "
                                    f"{', '.join(running)} still ran; the job was stopped")

    def wait(self) -> dict[str, int]:
        """Wait until every foreground process exits 0 (then the background
        ones); raise :class:`ProcessFailed` on the first failure or at the deadline."""
        foreground = [m for m in self.members if not m.background]
        finished_at = None
        while True:
            self._check_failures()
            if finished_at is None and all(m.popen.poll() == 0 for m in foreground):
                finished_at = time.monotonic()
            if finished_at is not None:
                if all(m.popen.poll() is not None for m in self.members):
                    break
                if time.monotonic() - finished_at > self.grace_s:
                    self.kill()
                    break
            if time.monotonic() > self.deadline:
                running = [m for m in self.members if m.popen.poll() is None]
                self.kill()
                first = running[0] if running else self.members[0]
                raise ProcessFailed(
                    first.name, None, tail(first.log_path),
                    f"deadline of {self.deadline_s:.0f} s passed; still running: {', '.join(m.name for m in running)}",
                )
            time.sleep(self.poll_s)
        return {m.name: m.popen.returncode for m in self.members}

    def kill(self, term_wait_s: float = 3.0) -> None:
        """SIGTERM every process group, then SIGKILL what is left; reap all."""
        alive = [m for m in self.members if m.popen.poll() is None]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for m in alive:
                try:
                    os.killpg(m.popen.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            end = time.monotonic() + term_wait_s
            while time.monotonic() < end and any(m.popen.poll() is None for m in alive):
                time.sleep(0.05)
            alive = [m for m in alive if m.popen.poll() is None]
            if not alive:
                break
        for m in self.members:
            try:
                os.killpg(m.popen.pid, signal.SIGKILL)  # children a process left in its group
            except (ProcessLookupError, PermissionError):
                pass
            m.popen.wait()

    def __enter__(self) -> "ProcessGroup":
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.kill()
        finally:
            if self.on_cleanup:
                self.on_cleanup()
