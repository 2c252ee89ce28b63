"""A private loopback for one job: a user + network namespace nobody else can reach.

Book: none (the runtime's security: local DistDGL jobs).

Used in: no notebook directly.

Loopback is not a trust boundary: DGL's RPC unpickles every request and
authenticates nobody, so any other user of a shared host who connects to a
job's 127.0.0.1 ports (graph servers, trainers' receivers, the rendezvous
store) runs code as the job's owner.  Where the kernel allows unprivileged
user namespaces, :class:`PrivateNetwork` starts one *holder* process,
``unshare --user --map-current-user --keep-caps --net``, which brings its own
``lo`` up and then sleeps; every process of the job is started with
:meth:`PrivateNetwork.prefix` (``nsenter --target HOLDER --user --net
--preserve-credentials --``), so all of them share that one loopback, and no
process outside the namespace, whoever runs it, can connect to their ports.

Nothing else changes: no mount or PID namespace (``/dev/shm``, ``/proc`` and
the files are the host's, so the reaper, memory budgets and result files work
as before), the same user id (the user namespace maps the user to itself),
and ``nsenter`` executes the command in place, so the process the supervisor
started is the job's process (its pid, its process group, its
``PR_SET_PDEATHSIG``).  The holder carries the job's marker
(:func:`gnnbook.base.reaper.marker_env`) and dies with its supervisor, so the
watchdog removes it with the job.

Where user namespaces are unavailable, :func:`unavailable_reason` says why
and what to enable (:data:`SYSCTLS`), and :func:`exposure_warning` names what
a job on the shared loopback exposes.

Example:
    >>> reason = unavailable_reason()
    >>> reason is None or "namespace" in reason
    True
"""
from __future__ import annotations

import functools
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

# (setting, its file, the value that forbids unprivileged user namespaces, how to allow them)
SYSCTLS = (
    ("kernel.unprivileged_userns_clone", "/proc/sys/kernel/unprivileged_userns_clone", "0",
     "sudo sysctl -w kernel.unprivileged_userns_clone=1 (Debian's switch)"),
    ("kernel.apparmor_restrict_unprivileged_userns", "/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1",
     "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (Ubuntu 23.10 and later; or give unshare an "
     "AppArmor profile with 'userns,')"),
    ("user.max_user_namespaces", "/proc/sys/user/max_user_namespaces", "0",
     "sudo sysctl -w user.max_user_namespaces=10000"),
)
TOOLS = ("unshare", "nsenter", "ip")
# How unshare maps the user: to itself where util-linux can keep the capabilities
# that bring lo up (2.38+), else to root inside (the same user outside).
MAPPINGS = (("--map-current-user", "--keep-caps"), ("--map-root-user",))
READY = "gnnbook-private-net-ready"
START_S = 10.0


def _tool(name: str) -> str | None:
    """The path of ``name``, also in the sbin folders (not on a Debian user's PATH, where ``ip`` lives)."""
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", os.defpath), "/usr/sbin", "/sbin"]))


def _holder_argv(mapping: tuple[str, ...]) -> list[str]:
    script = f"{shlex.quote(_tool('ip') or 'ip')} link set lo up && echo {READY} && exec sleep 2147483647"
    return ["unshare", "--user", *mapping, "--net", "--", "sh", "-c", script]


def _sysctl_hint() -> str:
    """What the kernel settings forbid, and the command that allows it ('' if none)."""
    hints = []
    for name, path, forbidding, fix in SYSCTLS:
        try:
            if Path(path).read_text().strip() == forbidding:
                hints.append(f"{name} is {forbidding}: to enable, {fix}")
        except OSError:
            pass
    return "; ".join(hints)


@functools.lru_cache(maxsize=None)
def _probe() -> tuple[tuple[str, ...] | None, str | None]:
    """(the unshare mapping options that work here, None) or (None, the reason none does)."""
    if not sys.platform.startswith("linux"):
        return None, "user and network namespaces need Linux"
    missing = [tool for tool in TOOLS if _tool(tool) is None]
    if missing:
        return None, f"the tools {', '.join(missing)} are missing (util-linux and iproute2 provide them)"
    errors = []
    for mapping in MAPPINGS:
        argv = ["unshare", "--user", *mapping, "--net", "--", _tool("ip") or "ip", "link", "set", "lo", "up"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as err:
            errors.append(str(err))
            continue
        if done.returncode == 0:
            return mapping, None
        errors.append(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
    hint = _sysctl_hint()
    return None, (f"this kernel refuses an unprivileged user namespace ({errors[-1]})"
                  + (f"; {hint}" if hint else "; check the kernel's user namespace settings (user.max_user_namespaces, "
                     "kernel.unprivileged_userns_clone, AppArmor or a container's seccomp profile)"))


def unavailable_reason() -> str | None:
    """None where a job can have a private network here, else why not and what to enable."""
    return _probe()[1]


def exposure_warning(reason: str) -> str:
    """The warning for a job that must run on the host's shared loopback."""
    return (f"gnnbook: warning: this job runs on the host's shared loopback, not in a private network namespace: "
            f"{reason}.  Any other user of this host can connect to its graph servers, trainers' receivers and "
            "rendezvous store on 127.0.0.1 and, through DGL's unauthenticated RPC (which unpickles every request), "
            "run code as you.  Run jobs only on a host you do not share, or enable unprivileged user namespaces.")


class PrivateNetwork:
    """One job's private loopback: :meth:`start` the holder, start the job's processes
    with :meth:`prefix`, :meth:`close` when they are gone (the holder also dies with
    this process, and with the job's watchdog through ``env``'s marker)."""

    def __init__(self, env: dict[str, str] | None = None):
        mapping, reason = _probe()
        if mapping is None:
            raise OSError(reason)
        self.mapping = mapping
        self.env = dict(env or {})
        self.holder: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        if self.holder is None:
            raise RuntimeError("the private network is not started")
        return self.holder.pid

    def start(self, within_s: float = START_S) -> "PrivateNetwork":
        """Start the holder and wait (at most ``within_s``) until its loopback is up."""
        from .procs import die_with_parent  # the pre-exec step of every supervised process

        self.holder = subprocess.Popen(_holder_argv(self.mapping), env={**os.environ, **self.env},
                                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       start_new_session=True, preexec_fn=die_with_parent)
        end, out = time.monotonic() + within_s, b""
        while READY.encode() not in out:
            left = end - time.monotonic()
            if left <= 0 or self.holder.poll() is not None:
                err = (self.holder.stderr.read().decode(errors="replace").strip() if self.holder.poll() is not None
                       else "")
                self.close()
                raise OSError(f"the private network namespace did not come up within {within_s:.0f} s"
                              + (f": {err}" if err else ""))
            if select.select([self.holder.stdout], [], [], min(left, 0.2))[0]:
                chunk = os.read(self.holder.stdout.fileno(), 4096)
                out += chunk
        return self

    def prefix(self) -> list[str]:
        """Put this in front of a command to run it in the namespace (same process, same user)."""
        return ["nsenter", f"--target={self.pid}", "--user", "--net", "--preserve-credentials", "--"]

    def close(self) -> None:
        """Kill the holder (the namespace goes when the last process in it is gone)."""
        if self.holder is None:
            return
        if self.holder.poll() is None:
            try:
                os.killpg(self.holder.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.holder.wait(10)
        except subprocess.TimeoutExpired:
            print(f"gnnbook: the private network's holder (pid {self.holder.pid}) did not exit after SIGKILL",
                  file=sys.stderr)
        for stream in (self.holder.stdout, self.holder.stderr):
            if stream is not None:
                stream.close()
        self.holder = None

    def __enter__(self) -> "PrivateNetwork":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
