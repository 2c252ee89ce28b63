"""Check that the installed packages match the course's pins.

Book: 8.1 setting up DGL.

Used in: chapters/08_dgl_practice.ipynb.

The pins live in one place, ``pyproject.toml``; this module reads them back
from the installed package's metadata, so the check can never drift from the
install.  ``python -m gnnbook env`` prints the table and exits non-zero when a
pin is violated (for example torch 2.3 beside DGL 2.1, which DGL cannot load).

:func:`check_device` is the one check of a ``--device`` option: every command
that takes one calls it before any work, and it stops with the fix when the
device cannot be used (PyPI's DGL 2.1.0 is a CPU build, whatever torch is).

Example:
    >>> problems = check_pins({"torch": "2.3.0", "dgl": "2.1.0"}, ["torch==2.2.1", "dgl==2.1.0"])
    >>> problems[0].name, problems[0].installed
    ('torch', '2.3.0')
"""
from __future__ import annotations

import importlib.metadata as metadata
import platform
import sys
from dataclasses import dataclass

from packaging.requirements import Requirement

from .errors import UserError

# Why each hard pin exists, shown when it is violated.
WHY = {
    "torch": "DGL 2.1.0 supports torch 2.0.0-2.2.1 only (its C++ graphbolt library is built per torch release)",
    "dgl": "the course's distributed trainer follows DGL 2.1.0's DistDGL environment contract",
    "torchdata": "DGL 2.1.0's graphbolt imports torchdata.datapipes, removed in torchdata 0.10",
    "numpy": "torch 2.2 is built against NumPy 1.x and fails to exchange arrays with NumPy 2",
    "setuptools": "DGL 2.1.0 imports setuptools.extern, removed in setuptools 70",
}
# Packages shown even when healthy: the ones whose versions explain most problems.
KEY_PACKAGES = ["torch", "dgl", "torchdata", "numpy", "setuptools", "torch-geometric", "pymetis"]


@dataclass
class PinProblem:
    name: str
    required: str
    installed: str | None

    def message(self) -> str:
        have = f"{self.installed} is installed" if self.installed else "it is not installed"
        why = f" ({WHY[self.name]})" if self.name in WHY else ""
        return f"{self.name}{self.required} is required but {have}{why}."


def course_requirements(extras: tuple[str, ...] = ()) -> list[str]:
    """The requirement strings of the installed gnnbook (plus the given extras)."""
    out = []
    for line in metadata.requires("gnnbook") or []:
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras):
            out.append(str(Requirement(line.split(";")[0])))
    return out


def installed_versions(names) -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def check_pins(installed: dict[str, str | None], requirements: list[str]) -> list[PinProblem]:
    """Every requirement that ``installed`` (name -> version) does not satisfy."""
    problems = []
    for line in requirements:
        req = Requirement(line)
        version = installed.get(req.name)
        # Local version labels (2.2.1+cu121) satisfy ==2.2.1.
        if version is None or not req.specifier.contains(version.split("+")[0], prereleases=True):
            problems.append(PinProblem(req.name, str(req.specifier), version))
    return problems


def report() -> tuple[str, list[PinProblem]]:
    """A readable table of the key versions and the list of violated pins."""
    requirements = course_requirements()
    names = list(dict.fromkeys(KEY_PACKAGES + [Requirement(r).name for r in requirements]))
    versions = installed_versions(names)
    problems = check_pins(versions, requirements)
    lines = [f"python      {platform.python_version()} ({sys.executable})"]
    lines += [f"{name:<11} {versions[name] or 'not installed'}" for name in KEY_PACKAGES]
    try:
        import torch

        cuda = (f"available: {torch.cuda.get_device_name(0)}" if torch.cuda.is_available()
                else "not available (CPU only)")
        lines.append(f"cuda        {cuda}")
    except Exception as exc:  # a broken torch is exactly what this command must report
        lines.append(f"torch import failed: {exc}")
    return "\n".join(lines), problems


# DGL's own wheel index for the pinned torch (2.2.x) and the CUDA of PyPI's torch 2.2.1 (12.1).
DGL_CUDA_INSTALL = "pip install dgl==2.1.0 -f https://data.dgl.ai/wheels/torch-2.2/cu121/repo.html"


def gpu_message(reason: str) -> str:
    """Why a CUDA device cannot be used here and what to do about it (one paragraph)."""
    return (f"cannot use a CUDA device: {reason}. PyPI's dgl 2.1.0 (the one the course pins) is a CPU-only "
            f"build. For GPU training install DGL's CUDA build for the pinned torch 2.2.1 (CUDA 12.1) from "
            f"DGL's own wheel index: `{DGL_CUDA_INSTALL}`, on a machine with an NVIDIA driver for CUDA 12.1 "
            f"(check with `python -m gnnbook env`). Without it, run on the CPU (--device cpu, the default). "
            f"The parts of the course that use a GPU without DGL (labs/lab12_feature_loading.ipynb, "
            f"feature loading with pinned and zero-copy memory) need only torch's CUDA.")


def dgl_has_cuda() -> bool:
    """Whether the installed DGL was built with CUDA and sees a GPU (its runtime's CUDA device 0 exists)."""
    import dgl

    return bool(dgl.ndarray.gpu(0).exist)


def check_device(device: str, needs_dgl: bool = True) -> str:
    """Return ``device`` when it can be used; otherwise raise :class:`UserError` with the fix.

    ``cpu`` always passes.  ``cuda`` (or ``cuda:N``) needs torch to see a GPU and, with
    ``needs_dgl`` (graphs on the device), DGL's CUDA build.  Commands call this before any work.

    Example:
        >>> check_device("cpu")
        'cpu'
    """
    import torch

    kind = str(device).split(":")[0]
    if kind == "cpu":
        return device
    if kind != "cuda":
        raise UserError(f"unknown device '{device}': use cpu or cuda (cuda:N for GPU N).")
    if not torch.cuda.is_available():
        raise UserError(gpu_message(f"torch {torch.__version__} sees no CUDA GPU (torch.cuda.is_available() "
                                    "is False)"))
    if needs_dgl and not dgl_has_cuda():
        raise UserError(gpu_message("the installed DGL has no CUDA support"))
    return device
