"""A hard memory budget for a group of processes (one emulated machine), and its measured peak.

Book: 1.2.1 why GNN training gets large; 1.2.3 the difficulties of distributed training (a graph
that does not fit one machine's memory).

Used in: chapters/08b_beyond_one_machine.ipynb.

Each emulated machine of a local DistDGL job (its graph server, trainers and samplers together)
can run under one :class:`MemoryBudget`: a Linux memory cgroup with a hard limit
(cgroup v2 ``memory.max``, or v1 ``memory.limit_in_bytes``), its peak read from the cgroup
(v2 ``memory.peak``, v1 ``memory.max_usage_in_bytes``) and the kernel's OOM kills counted, so a
machine over its budget is reported by name ("machine 1 exceeded its 2.0 GiB budget (peak
2.0 GiB, killed by the kernel)"), never as a bare SIGKILL.  Shared memory a process of the
machine fills (DistDGL's partition in ``/dev/shm``) is charged to it too.

Making a cgroup needs root, or a cgroup v2 subtree delegated to the user.  Where none can be
made, the budget still measures (mode ``"measured"``): the machine's peak is the sum of its
processes' peak resident memory (``VmHWM``), an upper bound of the simultaneous peak, checked
against the budget afterwards but not enforced.  :func:`cgroup_support` says which mode this
machine gets and why.

Example:
    >>> budget = MemoryBudget("example", 2 * 2**30)
    >>> budget.limit_bytes
    2147483648
    >>> format_gib(budget.limit_bytes)
    '2.0 GiB'
    >>> budget.close()
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MemoryBudget", "BudgetReport", "cgroup_support", "parse_bytes", "format_gib"]

CGROUP_ROOT = Path("/sys/fs/cgroup")
_UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 10**3, "KIB": 2**10, "M": 2**20, "MB": 10**6, "MIB": 2**20,
          "G": 2**30, "GB": 10**9, "GIB": 2**30, "T": 2**40, "TB": 10**12, "TIB": 2**40}


def parse_bytes(text: str | int) -> int:
    """``"2GiB"``, ``"512 MiB"``, ``"1.5G"`` (binary), ``"2GB"`` (decimal) or a number of bytes.

    Example:
        >>> parse_bytes("2GiB"), parse_bytes("512M"), parse_bytes(1000)
        (2147483648, 536870912, 1000)
    """
    if isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(text))
    if not match or match.group(2).upper() not in _UNITS:
        raise ValueError(f"cannot read {text!r} as a size: write it like 2GiB, 512MiB or 1500000000")
    value = float(match.group(1)) * _UNITS[match.group(2).upper()]
    if value < 1:
        raise ValueError(f"a memory budget must be positive, got {text!r}")
    return int(value)


def format_gib(n: int | float) -> str:
    """Bytes as GiB with one decimal (MiB below 1 GiB)."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _own_cgroup(controller: str | None) -> str:
    """This process's cgroup path in the v1 hierarchy of ``controller``, or in v2 (``None``)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        number, controllers, path = line.split(":", 2)
        if (controller is None and number == "0") or (controller and controller in controllers.split(",")):
            return path
    raise OSError(f"no {controller or 'v2'} cgroup in /proc/self/cgroup")


def _v2_base() -> Path | None:
    """A cgroup v2 folder where this process may make children with the memory controller."""
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines() if line.split()[2] == "cgroup2"]
    for mount in mounts:
        base = Path(mount) / _own_cgroup(None).lstrip("/")
        controllers = ((base / "cgroup.controllers").read_text().split() if (base / "cgroup.controllers").exists()
                       else [])
        if "memory" in controllers and os.access(base, os.W_OK):
            return base
    return None


def _v1_base() -> Path | None:
    root = CGROUP_ROOT / "memory"
    if not (root / "memory.limit_in_bytes").exists():
        return None
    base = root / _own_cgroup("memory").lstrip("/")
    return base if os.access(base, os.W_OK) else None


def cgroup_support() -> tuple[str, str]:
    """``(mode, why)``: ``"cgroup-v2"``, ``"cgroup-v1"`` or ``"measured"`` (no cgroup could be made here)."""
    try:
        if _v2_base() is not None:
            return "cgroup-v2", "a writable cgroup v2 subtree with the memory controller"
        if _v1_base() is not None:
            return "cgroup-v1", "a writable cgroup v1 memory hierarchy"
    except OSError as exc:
        return "measured", f"cgroups unreadable here ({exc})"
    return "measured", ("no writable memory cgroup (run as root, or delegate a cgroup v2 subtree to this user, "
                        "e.g. systemd-run --user --scope -p Delegate=yes); peaks are measured, not enforced")


def _vm_hwm(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


@dataclass(frozen=True)
class BudgetReport:
    """What one machine's budget saw: its limit, its peak, whether the kernel killed it there."""

    name: str
    mode: str
    limit_bytes: int
    peak_bytes: int
    oom_kills: int

    @property
    def exceeded(self) -> bool:
        return self.oom_kills > 0 or self.peak_bytes > self.limit_bytes

    def message(self) -> str:
        how = "killed by the kernel at its limit" if self.oom_kills else (
            "measured, not enforced: no cgroup here" if self.mode == "measured" else "over its limit")
        if self.exceeded:
            return (f"{self.name} exceeded its {format_gib(self.limit_bytes)} budget "
                    f"(peak {format_gib(self.peak_bytes)}, {how})")
        return (f"{self.name} stayed within its {format_gib(self.limit_bytes)} budget "
                f"(peak {format_gib(self.peak_bytes)})")


class MemoryBudget:
    """A memory limit for a set of processes and everything they start.

    Start a process inside it with ``preexec_fn=budget.join`` (the child moves itself in before it
    exec's, so nothing it allocates escapes the limit), or move a running one with :meth:`add`.
    """

    def __init__(self, name: str, limit_bytes: int | str, mode: str | None = None):
        self.name, self.limit_bytes = name, parse_bytes(limit_bytes)
        self.mode = mode or cgroup_support()[0]
        self.path: Path | None = None
        self.pids: set[int] = set()
        self._hwm: dict[int, int] = {}
        if self.mode == "cgroup-v2":
            self.path = _v2_base() / f"gnnbook-{os.getpid()}-{os.urandom(3).hex()}-{_safe(name)}"
            self.path.mkdir()
            (self.path / "memory.max").write_text(str(self.limit_bytes))
            if (self.path / "memory.swap.max").exists():
                (self.path / "memory.swap.max").write_text("0")
        elif self.mode == "cgroup-v1":
            self.path = _v1_base() / f"gnnbook-{os.getpid()}-{os.urandom(3).hex()}-{_safe(name)}"
            self.path.mkdir()
            (self.path / "memory.limit_in_bytes").write_text(str(self.limit_bytes))
            if (self.path / "memory.memsw.limit_in_bytes").exists():  # no escape into swap
                try:
                    (self.path / "memory.memsw.limit_in_bytes").write_text(str(self.limit_bytes))
                except OSError:
                    pass

    @property
    def enforced(self) -> bool:
        return self.path is not None

    def join(self) -> None:
        """In a child before exec (``preexec_fn``): move this process into the budget."""
        if self.path is not None:
            with open(self.path / "cgroup.procs", "w") as handle:
                handle.write(str(os.getpid()))

    def add(self, pid: int) -> None:
        """Put a running process under the budget (measured mode: watch its peak)."""
        self.pids.add(pid)
        if self.path is not None:
            (self.path / "cgroup.procs").write_text(str(pid))

    def sample(self) -> None:
        """Measured mode: note the peaks of the watched processes while they still live."""
        if self.path is None:
            for pid in list(self.pids):
                self._hwm[pid] = max(self._hwm.get(pid, 0), _vm_hwm(pid))

    def _read(self, *names: str) -> str | None:
        for name in names:
            if self.path is not None and (self.path / name).exists():
                return (self.path / name).read_text()
        return None

    def peak_bytes(self) -> int:
        if self.path is None:
            self.sample()
            return sum(self._hwm.values())
        text = self._read("memory.peak", "memory.max_usage_in_bytes")
        return int(text.split()[0]) if text else 0

    def oom_kills(self) -> int:
        text = self._read("memory.events", "memory.oom_control") or ""
        match = re.search(r"^oom_kill (\d+)", text, re.M)
        return int(match.group(1)) if match else 0

    def report(self) -> BudgetReport:
        return BudgetReport(self.name, self.mode, self.limit_bytes, self.peak_bytes(), self.oom_kills())

    def close(self, wait_s: float = 5.0) -> None:
        """Remove the cgroup once its processes are gone (the kernel refuses while one lives)."""
        if self.path is None:
            return
        end = time.monotonic() + wait_s
        while True:
            try:
                self.path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.05)
        self.path = None

    def __enter__(self) -> "MemoryBudget":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:40]
