"""Run one submission's code where it cannot touch anything else: the grader's sandbox.

Book: none (autograding).

Used in: no notebook directly (``gnnbook.course.grading.engine`` runs every student process here).

A command run by :func:`run_sandboxed` gets, on Linux as root:

- its own **network** (a new namespace with only a loopback: it can reach no server of the host, and
  nobody can reach its servers), its own **process tree** (a PID namespace: when the sandbox ends,
  every process the submission started ends with it, a fork bomb included) and its own **/tmp,
  /var/tmp and /dev/shm** (empty, private, gone afterwards);
- an **unprivileged user** (``nobody``, through ``setpriv``, no new privileges): the package, the
  datasets and the other submissions are read-only to it; the only folder it may write is ``workdir``;
- **limits**: CPU seconds, address space, open files, processes of that user and file size
  (``setrlimit``), and a wall-clock deadline after which the whole sandbox is killed (SIGKILL: a
  program that ignores SIGINT or SIGTERM still stops).

Where the grader is not root, the command runs as the grader in a user namespace with the same
network, process and /tmp isolation, but the package is only as protected as the grader's own files
(:func:`sandbox_warning` says so).

Example:
    >>> import sys, tempfile
    >>> result = run_sandboxed([sys.executable, "-c", "print(6 * 7)"], tempfile.mkdtemp(), deadline_s=60)
    >>> result.returncode, result.output.strip()
    (0, '42')
"""
from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

UNPRIVILEGED_USER = "nobody"
UNPRIVILEGED_GROUP = "nogroup"


@dataclass(frozen=True)
class Limits:
    """What one sandboxed command may use (each a hard limit of the kernel, but ``deadline_s``, which the grader
    keeps)."""

    deadline_s: float = 300.0          # wall clock, then SIGKILL of the whole sandbox
    cpu_s: int = 600                   # CPU seconds per process (RLIMIT_CPU)
    memory_bytes: int = 8 << 30        # address space per process (RLIMIT_AS)
    processes: int = 256               # processes of the sandbox's user (RLIMIT_NPROC)
    file_bytes: int = 1 << 30          # largest file it may write (RLIMIT_FSIZE)
    open_files: int = 1024             # RLIMIT_NOFILE


@dataclass(frozen=True)
class SandboxResult:
    returncode: int | None             # None: killed at the deadline
    output: str                        # stdout and stderr together (the last 20,000 characters)
    seconds: float
    reason: str                        # "" when it exited with 0, else why not, in words


def _limit(limits: Limits):
    def apply() -> None:
        os.setsid()
        for which, value in ((resource.RLIMIT_CPU, limits.cpu_s), (resource.RLIMIT_AS, limits.memory_bytes),
                             (resource.RLIMIT_FSIZE, limits.file_bytes), (resource.RLIMIT_NOFILE, limits.open_files),
                             (resource.RLIMIT_NPROC, limits.processes), (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(which, (value, value))
    return apply


# Run by sh inside the new namespaces, still privileged: bring up the loopback, give the command private
# temporary folders (the work folder is bound under the private /dev/shm first, since it may live in /tmp),
# then drop to the unprivileged user.  "$1" is the work folder, the rest the command.
# "$2" and "$3" (or two empty strings): a folder the unprivileged user cannot pass (the grader's home, 0700) that
# holds the Python running the grader, and the child of it on the way there: the folder is replaced by an empty
# one that holds only that child, bound back (so the interpreter runs, and the rest of the home stays unseen).
_INSIDE = ("set -e; work=$1; closed=$2; needed=$3; shift 3; ip link set lo up; "
           "mount -t tmpfs -o mode=1777,size=4g tmpfs /dev/shm; "
           "mkdir /dev/shm/work; mount --bind \"$work\" /dev/shm/work; "
           "if [ -n \"$closed\" ]; then mkdir /dev/shm/.keep; mount --bind \"$needed\" /dev/shm/.keep; "
           "mount -t tmpfs -o mode=755 tmpfs \"$closed\"; mkdir -p \"$needed\"; "
           "mount --bind /dev/shm/.keep \"$needed\"; "
           "umount /dev/shm/.keep; rmdir /dev/shm/.keep; fi; "
           "mount -t tmpfs -o mode=1777 tmpfs /tmp; mount -t tmpfs -o mode=1777 tmpfs /var/tmp; "
           "cd /dev/shm/work; exec \"$@\"")
SANDBOX_WORKDIR = "/dev/shm/work"      # where the command sees ``workdir``


def is_privileged() -> bool:
    """Whether the grader can drop a submission to an unprivileged user (it runs as root)."""
    return os.geteuid() == 0


def sandbox_warning() -> str | None:
    """Why this grader's sandbox is weaker than documented, or None."""
    if not is_privileged():
        return ("gnnbook: warning: the grader is not root, so submissions run as you (in private network, process "
                "and /tmp namespaces): a submission can write wherever you can. Grade as root (sudo make autograde) "
                "to run each one as the unprivileged user 'nobody'.")
    missing = [tool for tool in ("unshare", "setpriv", "ip", "mount") if shutil.which(tool) is None]
    return f"gnnbook: the sandbox needs {missing} (util-linux, iproute2)" if missing else None


def closed_folder(executable: str) -> tuple[str, str]:
    """``(folder, child)``: the first folder on the way to ``executable``'s real file that other users cannot
    pass, and its child on that way; ``("", "")`` when every folder is open (a Python installed in root's
    home, as pyenv does, is the case this handles)."""
    path = Path(os.path.realpath(executable))
    for child in reversed(path.parents[:-1]):
        folder = child.parent
        if folder.stat().st_mode & 0o001 == 0:
            return str(folder), str(child)
    return "", ""


def sandbox_argv(argv: list[str], workdir: Path) -> list[str]:
    """``argv`` wrapped so that it runs in the sandbox with ``workdir`` as its working folder."""
    if is_privileged():
        drop = ["setpriv", f"--reuid={UNPRIVILEGED_USER}", f"--regid={UNPRIVILEGED_GROUP}", "--clear-groups",
                "--no-new-privs", "--"]
        unshare = ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount", "--propagation", "private"]
    else:
        drop = []
        unshare = ["unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child", "--mount",
                   "--propagation", "private"]
    closed = closed_folder(argv[0]) if is_privileged() else ("", "")
    return [*unshare, "--", "sh", "-c", _INSIDE, "sandbox", str(workdir), *closed, *drop, *argv]


def prepare_workdir(workdir: Path) -> Path:
    """Make ``workdir`` the one folder the sandbox's user may write (and read); returns it."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if is_privileged():
        import grp
        import pwd
        uid, gid = pwd.getpwnam(UNPRIVILEGED_USER).pw_uid, grp.getgrnam(UNPRIVILEGED_GROUP).gr_gid
        for path in [workdir, *workdir.rglob("*")]:
            os.chown(path, uid, gid)
    # the folders above must be passable for the unprivileged user to reach it (tempfile makes them 0700)
    for parent in workdir.parents:
        if parent.stat().st_mode & 0o001 == 0 and str(parent).startswith(("/tmp/", "/var/tmp/")):
            parent.chmod(parent.stat().st_mode | 0o001)
    return workdir


def start_sandboxed(argv: list[str], workdir: Path | str, env: dict[str, str] | None = None,
                    limits: Limits | None = None) -> subprocess.Popen:
    """Start ``argv`` in the sandbox, in ``workdir``, without waiting (its output goes to
    ``workdir/.sandbox-output``); end it with :func:`stop_sandboxed`.  ``env`` is the whole environment
    (PATH, PYTHONPATH, ...) besides HOME and TMPDIR, which point into the work folder."""
    limits = limits or Limits()
    workdir = prepare_workdir(Path(workdir))
    environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(env or {}),
                   "HOME": SANDBOX_WORKDIR, "TMPDIR": "/tmp", "MPLCONFIGDIR": f"{SANDBOX_WORKDIR}/.matplotlib"}
    with open(workdir / ".sandbox-output", "wb") as out:
        return subprocess.Popen(sandbox_argv(argv, workdir), env=environment, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, preexec_fn=_limit(limits))


def stop_sandboxed(process: subprocess.Popen, workdir: Path | str, limits: Limits,
                   returncode: int | None = None) -> SandboxResult:
    """Kill what is left of a sandbox (the whole PID namespace) and say how it ended (``returncode``
    None: stopped by the grader at its deadline)."""
    _kill_group(process)
    output = (Path(workdir) / ".sandbox-output").read_text(errors="replace")[-20_000:]
    return SandboxResult(returncode, output, 0.0, describe_exit(returncode, limits, output))


def run_sandboxed(argv: list[str], workdir: Path | str, env: dict[str, str] | None = None,
                  limits: Limits | None = None, deadline_s: float | None = None) -> SandboxResult:
    """Run ``argv`` in the sandbox (see the module's docstring), in ``workdir``, until it exits or its
    deadline; never raises for what the command did: the result says how it ended."""
    limits = limits or Limits()
    if deadline_s is not None:
        limits = Limits(**{**limits.__dict__, "deadline_s": deadline_s})
    start = time.monotonic()
    process = start_sandboxed(argv, workdir, env, limits)
    try:
        returncode = process.wait(limits.deadline_s)
    except subprocess.TimeoutExpired:
        returncode = None
    result = stop_sandboxed(process, workdir, limits, returncode)
    return SandboxResult(result.returncode, result.output, time.monotonic() - start, result.reason)


def _kill_group(process: subprocess.Popen) -> None:
    """SIGKILL the sandbox's session: unshare, and through --kill-child the PID namespace's first process,
    whose death ends every process in the namespace; returns once every process it had started is gone
    (SIGKILL is delivered asynchronously: a fork bomb's children die a moment after their parent)."""
    import psutil

    try:
        started = psutil.Process(process.pid).children(recursive=True)
    except psutil.Error:
        started = []
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for child in started:
        try:
            child.kill()
        except psutil.Error:
            pass
    process.wait()
    psutil.wait_procs(started, timeout=10)


def describe_exit(returncode: int | None, limits: Limits, output: str) -> str:
    """How a sandboxed command ended, in words ("" for a clean exit)."""
    if returncode == 0:
        return ""
    if returncode is None:
        return (f"stopped at the grader's deadline of {limits.deadline_s:g} s (a loop that never ends, or code "
                "far slower than the lab's solution?)")
    if returncode < 0 or returncode > 128:
        number = -returncode if returncode < 0 else returncode - 128
        name = signal.Signals(number).name if number in signal.Signals._value2member_map_ else f"signal {number}"
        why = {"SIGXCPU": f"past the CPU limit of {limits.cpu_s} s", "SIGKILL": "killed (out of memory?)",
               "SIGSEGV": "a crash (segmentation fault)",
               "SIGXFSZ": "wrote a file larger than the limit"}.get(name, name)
        return f"the process ended by {name}: {why}"
    if "MemoryError" in output or "Cannot allocate memory" in output:
        return f"ran out of the sandbox's memory ({limits.memory_bytes >> 30} GiB)"
    return f"exited with status {returncode}"
