"""Supervise a group of OS processes: fail fast, a deadline, nothing left behind.

Book: none (supervised processes: every multi-process chapter).

Used in: no notebook directly.

Every multi-process run in the course (torch.distributed workers, DistDGL
servers and trainers) goes through :class:`ProcessGroup`.  Each process gets
its own session (process group) and log file.  The group is watched; the first
process that exits non-zero or dies by a signal makes the whole group be
killed, and :class:`ProcessFailed` names it and shows the tail of its log.
A global deadline does the same for a hang (after asking every process that
handles SIGUSR1 for a stack dump into its log).  Leaving the ``with`` block
always kills whatever is still running, grandchildren included, and removes
the group's shared memory.  A watchdog (:mod:`gnnbook.base.reaper`) does the same
if the supervising process itself is killed, and a SIGTERM to the supervisor
first cleans up, then terminates it as it would have.

Example:
    >>> import sys
    >>> with ProcessGroup(deadline_s=30) as group:
    ...     hello = group.start("hello", [sys.executable, "-c", "print('hi')"])  # a Popen
    ...     codes = group.wait()
    >>> codes
    {'hello': 0}
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import reaper
from .budget import MemoryBudget


class Terminated(BaseException):
    """SIGTERM reached the supervisor while its group ran; the group is cleaned
    up, then the signal is delivered again."""


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


def die_with_parent() -> None:
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


class _SigtermHandler:
    """One SIGTERM handler for all running groups of this process (main thread
    only): it raises :class:`Terminated`, so that ``with`` blocks clean up; when
    the last group is closed, the previous handler comes back and the signal
    is delivered again (with the default action the process then ends)."""

    def __init__(self) -> None:
        self.groups: set[ProcessGroup] = set()
        self.previous = None
        self.caught = False

    def arm(self, group: "ProcessGroup") -> None:
        if threading.current_thread() is not threading.main_thread() or group in self.groups:
            return
        if not self.groups:
            self.previous = signal.signal(signal.SIGTERM, self.handle)
            self.caught = False
        self.groups.add(group)

    def handle(self, signum, frame) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not interrupt the clean-up
        self.caught = True
        for group in self.groups:
            group.terminated = True
        raise Terminated("SIGTERM: the process group is stopped, then the signal is delivered again")

    def disarm(self, group: "ProcessGroup") -> None:
        if group not in self.groups or threading.current_thread() is not threading.main_thread():
            return
        self.groups.discard(group)
        if not self.groups:
            signal.signal(signal.SIGTERM, self.previous if self.previous is not None else signal.SIG_DFL)
            if self.caught:
                self.caught = False
                os.kill(os.getpid(), signal.SIGTERM)


_sigterm = _SigtermHandler()


class ProcessGroup:
    """Start processes with :meth:`start`, then :meth:`wait` for them.

    ``background=True`` marks a process (a server) that is expected to run
    until the foreground processes finish; it is then given ``grace_s`` to
    exit by itself before it is stopped.  With ``background_exit_grace_s``
    set, a background process that exits (even with code 0) while foreground
    processes still run fails the job unless they all finish within that many
    seconds: a server that quit early leaves its clients waiting forever.
    Likewise with ``peer_exit_grace_s`` once one foreground process exited 0:
    a trainer that finished leaves peers waiting in a collective.

    Every process carries the group's ``tag`` in its environment
    (:func:`gnnbook.base.reaper.marker_env`), which is how its descendants are found.

    Without ``log_dir`` the logs go to a temporary ``gnnbook-job-*`` folder, removed when the ``with`` block
    ends well and kept, for the logs an error names, when it raises.

    More than 8 parameters: each is one rule of the supervision (the deadline, the graces of a background or a
    peer that exits, the poll period, the clean-up, the tag and the watchdog), set once by the caller that owns
    the job.
    """

    def __init__(self, deadline_s: float, log_dir: str | Path | None = None, poll_s: float = 0.05,
                 grace_s: float = 10.0, on_cleanup: Callable[[], None] | None = None,
                 background_exit_grace_s: float | None = None, peer_exit_grace_s: float | None = None,
                 tag: str | None = None, watchdog: bool = True):
        self.deadline = time.monotonic() + deadline_s
        self.deadline_s = deadline_s
        self.tag = tag or reaper.new_tag()
        self._temporary_log_dir = not log_dir
        self.log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="gnnbook-job-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.poll_s, self.grace_s = poll_s, grace_s
        self.members: list[_Member] = []
        self.on_cleanup = on_cleanup
        self.background_exit_grace_s = background_exit_grace_s
        self.peer_exit_grace_s = peer_exit_grace_s
        self._background_exit: tuple[float, _Member] | None = None
        self.shm: set[str] = set()  # /dev/shm names the group's processes mapped
        self.removed_segments: list[str] = []
        self._recorded_at = 0.0
        self._use_watchdog = watchdog and sys.platform.startswith("linux")
        self.watchdog: reaper.Watchdog | None = None
        self.terminated = False  # set by SIGTERM
        self._preexisting_shm: frozenset[str] | None = None  # /dev/shm before the first start: never removed
        self.budgets: list[MemoryBudget] = []  # sampled while the group runs (measured mode)

    def _arm(self) -> reaper.Watchdog | None:
        """On the first start: the watchdog, and SIGTERM handled."""
        if self._preexisting_shm is None:
            self._preexisting_shm = reaper.shm_names()
        if self._use_watchdog and self.watchdog is None:
            self.watchdog = reaper.Watchdog(self.tag, self._preexisting_shm)
            if self._temporary_log_dir:
                self.watchdog.remove_on_death(self.log_dir)
        _sigterm.arm(self)
        return self.watchdog

    def arm(self) -> None:
        """Start the watchdog now (before the first process), e.g. to cover a helper process
        that carries the group's marker (:func:`gnnbook.base.reaper.marker_env`)."""
        self._arm()

    def remove_on_death(self, folder: str | Path) -> None:
        """Delete ``folder`` (a temporary one) if this supervising process is killed."""
        if watchdog := self._arm():
            watchdog.remove_on_death(folder)

    def undo_on_death(self, argv: list[str]) -> None:
        """Run ``argv`` if this supervising process is killed (after the group is)."""
        if watchdog := self._arm():
            watchdog.undo_on_death(argv)

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None,
              cwd: str | Path | None = None, background: bool = False,
              budget: MemoryBudget | None = None) -> subprocess.Popen:
        """Start ``argv`` as member ``name`` (its output in ``log_dir/name.log``); under
        ``budget`` it and all it starts share that memory limit (see :mod:`gnnbook.base.budget`)."""
        self._arm()
        log_path = self.log_dir / f"{name}.log"

        def before_exec() -> None:
            die_with_parent()
            if budget is not None:
                budget.join()  # before exec: nothing the process allocates escapes the limit

        with open(log_path, "wb") as log:
            popen = subprocess.Popen(
                argv, env={**os.environ, **(env or {}), **reaper.marker_env(self.tag)}, cwd=cwd, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=before_exec if sys.platform.startswith("linux") else None,
            )
        if budget is not None:
            budget.pids.add(popen.pid)  # measured mode reads their peaks
            if budget not in self.budgets:
                self.budgets.append(budget)
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
            raise ProcessFailed(m.name, code, tail(m.log_path),
                                f"process '{m.name}' {describe_exit(code)}; the job was stopped")
        self._check_peers()
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
                self.dump_stacks()  # where the processes left behind wait for the one that is gone
                self.kill()
                raise ProcessFailed(m.name, m.popen.returncode, tail(m.log_path),
                                    f"process '{m.name}' {describe_exit(m.popen.returncode)} while "
                                    f"{', '.join(running)} still ran; the job was stopped")

    def _check_peers(self) -> None:
        if self.peer_exit_grace_s is None:
            return
        foreground = [m for m in self.members if not m.background]
        finished = [m for m in foreground if m.exited_at is not None and m.popen.returncode == 0]
        running = [m for m in foreground if m.popen.poll() is None]
        if not finished or not running:
            return
        first = min(finished, key=lambda member: member.exited_at)
        if time.monotonic() - first.exited_at > self.peer_exit_grace_s:
            self.dump_stacks()
            self.kill()
            raise ProcessFailed(running[0].name, None, tail(running[0].log_path, 40),
                                f"process '{first.name}' exited with code 0 but {', '.join(m.name for m in running)} "
                                f"still ran {self.peer_exit_grace_s:.0f} s later (waiting for a peer that is gone?); "
                                "the job was stopped")

    def record(self) -> None:
        """Note the shared memory the group's processes map now (removed when they are gone)."""
        self.shm |= reaper.shm_mapped(reaper.job_pids(self.tag), self.tag)
        self._recorded_at = time.monotonic()

    def dump_stacks(self, wait_s: float = 3.0) -> list[int]:
        """SIGUSR1 to every process of the group that handles it (faulthandler,
        see :mod:`gnnbook.distributed._site`): each writes its threads' stacks
        to its log.  Returns their pids."""
        def sizes() -> list[int]:
            return [m.log_path.stat().st_size if m.log_path.exists() else 0 for m in self.members]

        last, changed = sizes(), False
        sent = reaper.signal_catchers(self.tag, signal.SIGUSR1)
        end = time.monotonic() + (wait_s if sent else 0)
        while time.monotonic() < end:  # until the logs have grown and stopped growing
            time.sleep(0.25)
            now = sizes()
            if changed and now == last:
                break
            changed, last = changed or now != last, now
        return sent

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
            self._check_time()
            time.sleep(self.poll_s)
        return {m.name: m.popen.returncode for m in self.members}

    def check(self) -> None:
        """What :meth:`wait` checks on every poll, once, for a caller that waits on something else
        (a pool's job): raise :class:`ProcessFailed`, the group stopped, when a process failed or
        the deadline passed."""
        self._check_failures()
        self._check_time()

    def _check_time(self) -> None:
        if time.monotonic() - self._recorded_at > reaper.RECORD_EVERY_S:
            self.record()
        for budget in self.budgets:
            budget.sample()
        if time.monotonic() > self.deadline:
            running = [m for m in self.members if m.popen.poll() is None]
            self.dump_stacks()
            self.kill()
            first = running[0] if running else self.members[0]
            raise ProcessFailed(
                first.name, None, tail(first.log_path),
                f"deadline of {self.deadline_s:.0f} s passed; still running: {', '.join(m.name for m in running)}",
            )

    def kill(self, term_wait_s: float = 3.0, reap_s: float = 10.0) -> None:
        """SIGTERM every process group, then SIGKILL what is left, then every
        other process of the group (re-parented, own session); reap all, each
        for at most ``reap_s``; remove the shared memory they mapped."""
        if self.members:
            self.record()
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
            # Children a process left in its group.  A reaped member's pid may belong to someone else's
            # new process group by now, so only a group that still holds a process of this job is
            # signalled (a group id in use cannot be reused).
            if reaper.group_holds_job_process(m.popen.pid, self.tag):
                try:
                    os.killpg(m.popen.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        if self.members:
            self.shm |= reaper.kill_job(self.tag)[1]
        for m in self.members:
            try:
                m.popen.wait(reap_s)
            except subprocess.TimeoutExpired:  # stuck in the kernel (D state): do not hang with it
                print(f"warning: process {m.name} (pid {m.popen.pid}) did not exit after SIGKILL", file=sys.stderr)
        self.removed_segments += reaper.remove_shm(self.shm, self.tag, self._preexisting_shm or frozenset())

    def close(self) -> None:
        """Disarm the watchdog (everything is cleaned up); after a SIGTERM, the
        last group closed delivers it again (the watchdog stays armed for the
        folders that a caller would have removed)."""
        if self.watchdog is not None and not self.terminated:
            self.watchdog.close()
            self.watchdog = None
        _sigterm.disarm(self)

    def __enter__(self) -> "ProcessGroup":
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.kill()
        finally:
            try:
                if self.on_cleanup:
                    self.on_cleanup()
            finally:
                self.close()
                # a temporary log folder goes with a group that ended well; after a failure it stays, for its logs
                if self._temporary_log_dir and exc[0] is None:
                    shutil.rmtree(self.log_dir, ignore_errors=True)
