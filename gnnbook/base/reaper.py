"""Nothing of a job outlives its supervisor, even one killed by SIGKILL.

Book: none (the watchdog of every multi-process job).

Used in: no notebook directly.

Every process a :class:`gnnbook.base.procs.ProcessGroup` starts carries the
environment variable ``GNNBOOK_JOB_<tag>=1``.  Children inherit it, so the
job's grandchildren (DGL's sampler processes, multiprocessing's resource
trackers, whatever a user script spawns) carry it too, even after they are
re-parented or start their own session: ``/proc/<pid>/environ`` names every
process of the job.  One variable per job (rather than one ``GNNBOOK_JOB``)
so that a job started inside another job's process (a notebook kernel run
by a test) is found by both.

The job's shared memory is found the same way: the ``/dev/shm`` files that
its processes map (``/proc/<pid>/maps``, by inode), among them the named semaphores of
Python's multiprocessing (``sem.mp-*``), which carry no job name.  Only
names a process creates for itself with a random suffix are ever removed
(:data:`OWN_SHM_PREFIXES`, plus any name holding the job's tag), and never a
segment the job merely opened: not one that existed before the job's first process
started (:func:`shm_names`, taken then), nor one that a live process outside the job
still maps when the job is gone.

The watchdog (``python -I reaper.py TAG PARENT_PID``, started by the group in
its own session, so that a Ctrl-C or a killed process group does not reach
it) reads commands on stdin, records the job's segments every second, and
when its stdin closes without ``done`` (the supervisor died) or its parent
changes, kills every process of the job, removes the recorded segments, the
segments holding the tag and the folders it was given, and runs the undo
commands it was given (network namespaces).

Example:
    >>> tag = new_tag()
    >>> job_pids(tag)
    []
"""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

MARKER_PREFIX = "GNNBOOK_JOB_"
SHM_DIR = Path("/dev/shm")
# Names made by their creator with a random part: multiprocessing semaphores,
# SharedMemory blocks and heap arenas, torch's shared tensors.
OWN_SHM_PREFIXES = ("sem.mp-", "psm_", "pym-", "torch_")
RECORD_EVERY_S = 1.0


def new_tag() -> str:
    """``gnnbook<pid>x<random>``: unique, and names the supervising process."""
    return f"gnnbook{os.getpid()}x{os.urandom(3).hex()}"


def marker_env(tag: str) -> dict[str, str]:
    """The variable that makes a process (and all its descendants) part of job ``tag``."""
    return {MARKER_PREFIX + tag: "1"}


def job_pids(tag: str) -> list[int]:
    """Every live process (other than this one) whose environment carries the job's marker."""
    needle, me, found = f"\0{MARKER_PREFIX}{tag}=".encode(), os.getpid(), []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as handle:
                if needle in b"\0" + handle.read():
                    found.append(int(entry.name))
        except OSError:  # gone, or another user's process
            pass
    return found


def shm_mapped(pids: list[int], tag: str = "") -> set[str]:
    """The removable ``/dev/shm`` names these processes map (see :data:`OWN_SHM_PREFIXES`).

    Matched by inode: a mapping shows the name the file had when it was
    mapped, which for a semaphore is glibc's temporary ``sem.XXXXXX``, not
    the ``sem.mp-*`` it was renamed to."""
    inodes = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as handle:
                lines = handle.read().splitlines()
        except OSError:
            continue
        for line in lines:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith(f"{SHM_DIR}/"):
                inodes.add(int(fields[4]))
    if not inodes or not SHM_DIR.is_dir():
        return set()
    return {entry.name for entry in os.scandir(SHM_DIR) if entry.inode() in inodes
            and (entry.name.startswith(OWN_SHM_PREFIXES) or (tag and tag in entry.name))}


def group_holds_job_process(pgid: int, tag: str) -> bool:
    """Whether a live process of job ``tag`` is in process group ``pgid`` (field 5 of its stat)."""
    for pid in job_pids(tag):
        try:
            with open(f"/proc/{pid}/stat") as handle:
                stat = handle.read()
            if int(stat[stat.rindex(")") + 2:].split()[2]) == pgid:
                return True
        except (OSError, ValueError, IndexError):
            pass
    return False


def catches(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has a handler for ``sig`` (``SigCgt`` in its status)."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except (OSError, ValueError):
        pass
    return False


def signal_catchers(tag: str, sig: int) -> list[int]:
    """Send ``sig`` to every process of the job that handles it (a process
    without a handler would die of it); return their pids."""
    sent = []
    for pid in job_pids(tag):
        if catches(pid, sig):
            try:
                os.kill(pid, sig)
                sent.append(pid)
            except OSError:
                pass
    return sent


def kill_job(tag: str, within_s: float = 5.0) -> tuple[list[int], set[str]]:
    """SIGKILL every process of the job until none is left (stopped first, so
    that none forks between the scan and the kill); return their pids and the
    segments they mapped."""
    killed, shm, end = [], set(), time.monotonic() + within_s
    while (pids := job_pids(tag)) and time.monotonic() < end:
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            if sig == signal.SIGKILL:
                shm |= shm_mapped(pids, tag)
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        killed += [p for p in pids if p not in killed]
        time.sleep(0.02)
    return killed, shm


def shm_names() -> frozenset[str]:
    """What ``/dev/shm`` holds now: taken before a job starts, none of it is the job's to remove."""
    return frozenset(os.listdir(SHM_DIR)) if SHM_DIR.is_dir() else frozenset()


def mapped_inodes() -> set[int]:
    """The inodes of the ``/dev/shm`` files that any live process (that we may read) maps."""
    inodes = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/maps") as handle:
                for line in handle:
                    fields = line.split(maxsplit=5)
                    if len(fields) == 6 and fields[5].startswith(f"{SHM_DIR}/"):
                        inodes.add(int(fields[4]))
        except (OSError, ValueError):
            pass
    return inodes


def remove_shm(names: set[str], tag: str = "", keep: frozenset[str] = frozenset()) -> list[str]:
    """Unlink ``names`` and every segment holding ``tag`` from /dev/shm; return what was removed.

    Call it when the job's processes are gone.  A name in ``keep`` (what existed before the job
    started) stays, and so does one that a live process still maps: the job opened it, someone
    else made it."""
    if tag and SHM_DIR.is_dir():
        names = set(names) | {p.name for p in SHM_DIR.iterdir() if tag in p.name}
    names = set(names) - set(keep)
    in_use = mapped_inodes() if names else set()
    removed = []
    for name in sorted(names):
        try:
            if (SHM_DIR / name).stat().st_ino in in_use:
                continue
        except OSError:
            continue
        try:
            (SHM_DIR / name).unlink()
            removed.append(name)
        except OSError:
            pass
    return removed


class Watchdog:
    """The supervisor's end: start the watchdog, tell it what to clean, disarm it."""

    def __init__(self, tag: str, preexisting: frozenset[str] | None = None):
        self.tag = tag
        env = {k: v for k, v in os.environ.items() if not k.startswith(MARKER_PREFIX)}
        self.popen = subprocess.Popen([sys.executable, "-I", str(Path(__file__).resolve()), tag, str(os.getpid())],
                                      stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env,
                                      start_new_session=True, text=True)
        # What /dev/shm held before the job, taken here and now: the watchdog's own start can come after the
        # job's first process has opened its segments, which it would then think were never the job's.
        self._send("preexisting", json.dumps(sorted(shm_names() if preexisting is None else preexisting)))

    def _send(self, *words: object) -> None:
        try:
            self.popen.stdin.write(json.dumps([str(w) for w in words]) + "\n")
            self.popen.stdin.flush()
        except (OSError, ValueError):
            pass

    def remove_on_death(self, folder: str | Path) -> None:
        """Delete ``folder`` if the supervisor dies."""
        self._send("folder", Path(folder).resolve())

    def keep(self, folder: str | Path) -> None:
        self._send("keep", Path(folder).resolve())

    def undo_on_death(self, argv: list[str]) -> None:
        """Run ``argv`` if the supervisor dies (after killing the job)."""
        self._send("run", json.dumps(list(argv)))

    def close(self, timeout_s: float = 5.0) -> None:
        """The supervisor cleaned up itself: the watchdog exits without sweeping."""
        self._send("done")
        try:
            self.popen.stdin.close()
        except OSError:
            pass
        try:
            self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout_s)


def sweep(tag: str, folders: set[str], undo: list[list[str]], shm: set[str],
          keep: frozenset[str] = frozenset()) -> None:
    """Kill the job, then remove its segments (not those in ``keep``) and folders and undo its setup."""
    killed, mapped = kill_job(tag, within_s=8.0)
    removed = remove_shm(shm | mapped, tag, keep)
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    for argv in reversed(undo):
        try:
            subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired):
            pass
    print(f"gnnbook reaper: job {tag}: killed {len(killed)} processes, removed {len(removed)} segments",
          file=sys.stderr)


def _exit_now(*_) -> None:
    raise SystemExit  # SIGTERM: sweep, then exit


def main(tag: str, parent: int) -> None:
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # a Ctrl-C or a closed terminal: the supervisor decides
    signal.signal(signal.SIGTERM, _exit_now)
    folders, undo, shm, recorded_at, pending = set(), [], set(), 0.0, b""
    preexisting = shm_names()  # until the supervisor's own snapshot, taken before the job's first process, arrives
    try:
        while True:
            gone = os.getppid() != parent  # re-parented: the supervisor died
            if not gone and time.monotonic() - recorded_at > RECORD_EVERY_S:
                shm |= shm_mapped(job_pids(tag), tag)
                recorded_at = time.monotonic()
            if not select.select([0], [], [], 0 if gone else RECORD_EVERY_S)[0]:
                if gone:
                    break
                continue
            chunk = os.read(0, 1 << 16)  # unbuffered: select must see every line still unread
            if not chunk:
                break  # the supervisor's end of the pipe closed: it is gone
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                command, *args = json.loads(line)
                if command == "done":
                    return
                if command == "folder":
                    folders.add(args[0])
                elif command == "keep":
                    folders.discard(args[0])
                elif command == "run":
                    undo.append(json.loads(args[0]))
                elif command == "preexisting":
                    preexisting = frozenset(json.loads(args[0]))
    except SystemExit:
        pass
    sweep(tag, folders, undo, shm, preexisting)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
