"""Emulated hosts with their own IP addresses: one Linux network namespace
plus one mount namespace per machine (root only).

Book: 8.3.4 cluster training, emulated with network namespaces.

Used in: no notebook directly.

Each emulated machine m gets a network namespace with interface ``gbnet0``
holding ``10.R.S.(m+2)/24`` on a bridge in the root namespace, and a mount
namespace with a private tmpfs on ``/dev/shm``.  The bridge itself has no
address: the machines reach each other through it, but the root namespace has
no route into their subnet (an ``unreachable`` route), so no process outside
the job (another user's included) can connect to their servers, which run as root.  Every process of machine m
is started with ``nsenter --net=... --mount=...``, so stock DGL 2.1.0 finds
its machine id from its own IP and its servers' shared memory cannot collide
with another machine's: the multi-host code path runs for real on one host.
Gloo needs ``GLOO_SOCKET_IFNAME`` set to the namespace's interface.

Leaving the ``with`` block unmounts and deletes everything (the namespace
files are unmounted before they are deleted), even after a failure.

Example:
    >>> with EmulatedHosts(2) as hosts:                  # doctest: +SKIP
    ...     [m.ip for m in hosts.machines]
    ['10.123.7.2', '10.123.7.3']
"""
from __future__ import annotations

import functools
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

from . import emulation
from .launcher import DGL_SERVER_PORT, LaunchError, Machine

RUN_DIR = Path("/run/gnnbook-netns")
IFNAME = "gbnet0"


# Bits of /proc/<pid>/status CapEff (linux/capability.h).
NEEDED_CAPABILITIES = {"CAP_NET_ADMIN": 12, "CAP_SYS_ADMIN": 21}


def _effective_capabilities() -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return None


@functools.lru_cache(maxsize=None)
def netns_available() -> str | None:
    """None when namespaces can be made here, else the reason they cannot
    (not root; root without CAP_NET_ADMIN / CAP_SYS_ADMIN, as in a default
    container; a missing tool; a kernel or sandbox that refuses a new namespace)."""
    if not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root (use mode='local' without root)"
    missing = [tool for tool in ("ip", "nsenter", "unshare", "mount", "umount") if shutil.which(tool) is None]
    if missing:
        return f"missing tools: {', '.join(missing)}"
    caps = _effective_capabilities()
    lacking = [name for name, bit in NEEDED_CAPABILITIES.items() if caps is not None and not caps >> bit & 1]
    if lacking:
        return (f"network namespaces need {' and '.join(lacking)}, which this root process lacks "
                "(a container started without --cap-add NET_ADMIN,SYS_ADMIN?); use mode='local'")
    try:  # the real test: make (and drop at once) a network and mount namespace
        probe = subprocess.run(["unshare", "--net", "--mount", "true"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"cannot create a network namespace here ({err}); use mode='local'"
    if probe.returncode != 0:
        return f"cannot create a network namespace here ({probe.stderr.strip() or probe.returncode}); use mode='local'"
    return None


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise LaunchError(f"`{' '.join(argv)}` failed: {done.stderr.strip()}")
    return done


class EmulatedHosts:
    """``num_machines`` namespaces, each a :class:`~gnnbook.distributed.launcher.Machine`."""

    def __init__(self, num_machines: int, port: int = DGL_SERVER_PORT):
        reason = netns_available()
        if reason:
            raise LaunchError(reason)
        rng = random.Random(os.getpid() ^ os.urandom(4)[0] << 8)
        self.tag = f"gb{rng.randrange(16**6):06x}"
        self.subnet = f"10.{rng.randrange(100, 250)}.{rng.randrange(1, 250)}"
        self.num_machines, self.port = num_machines, port
        self.root = RUN_DIR / self.tag
        self.bridge = f"{self.tag}br"
        self.machines: list[Machine] = []
        self._done: list[tuple[str, ...]] = []  # undo steps, run in reverse

    def undo_commands(self) -> list[list[str]]:
        """The shell commands that undo the set-up, in set-up order (run them in reverse): what a watchdog
        runs when the process that made these hosts dies before :meth:`__exit__`."""
        return [["rm", "-rf", step[1]] if step[0] == "rmdir" else list(step) for step in self._done]

    def __enter__(self) -> "EmulatedHosts":
        try:
            self._setup()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _setup(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._done.append(("rmdir", str(self.root)))
        _sh("mount", "--bind", str(self.root), str(self.root))
        self._done.append(("umount", "-l", str(self.root)))
        _sh("mount", "--make-private", str(self.root))
        _sh("ip", "link", "add", self.bridge, "type", "bridge")
        self._done.append(("ip", "link", "del", self.bridge))
        # No address on the bridge: with one (the subnet's .1) every local user could reach the machines.
        # And the subnet unreachable from here, rather than sent to the default gateway.
        _sh("ip", "route", "add", "unreachable", f"{self.subnet}.0/24")
        self._done.append(("ip", "route", "del", "unreachable", f"{self.subnet}.0/24"))
        _sh("ip", "link", "set", self.bridge, "up")
        for m in range(self.num_machines):
            ns, host_if, ip = f"{self.tag}m{m}", f"{self.tag}v{m}", f"{self.subnet}.{m + 2}"
            _sh("ip", "netns", "add", ns)
            self._done.append(("ip", "netns", "del", ns))
            _sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", IFNAME, "netns", ns)
            self._done.append(("ip", "link", "del", host_if))
            _sh("ip", "link", "set", host_if, "master", self.bridge, "up")
            for argv in (("addr", "add", f"{ip}/24", "dev", IFNAME), ("link", "set", IFNAME, "up"),
                         ("link", "set", "lo", "up")):
                _sh("ip", "-n", ns, *argv)
            mnt = self.root / f"m{m}.mnt"
            mnt.touch()
            self._done.append(("rm", "-f", str(mnt)))
            # A persistent mount namespace (bound to mnt) with its own /dev/shm.
            _sh("unshare", f"--mount={mnt}", "--propagation", "private",
                "mount", "-t", "tmpfs", "-o", "size=1g", "tmpfs", "/dev/shm")
            self._done.append(("umount", "-l", str(mnt)))
            prefix = ["nsenter", f"--net=/run/netns/{ns}", f"--mount={mnt}", "--"]
            # Its machine id, and our sitecustomize on the path: every Python process of the machine, an
            # unmodified script's too, then dumps its stacks on SIGUSR1 before a hung job is killed.
            env = {"GLOO_SOCKET_IFNAME": IFNAME, emulation.MACHINE_ENV: str(m), "PYTHONPATH": emulation.site_path()}
            self.machines.append(Machine(m, ip, self.port, prefix=prefix, extra_env=env))

    def __exit__(self, *exc) -> None:
        for argv in reversed(self._done):
            if argv[0] == "rmdir":
                shutil.rmtree(argv[1], ignore_errors=True)
            elif argv[0] == "rm":
                Path(argv[2]).unlink(missing_ok=True)
            else:
                _sh(*argv, check=False)
        self._done.clear()
