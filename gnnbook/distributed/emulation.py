"""Several DistDGL machines on one host, without root: the one adaptation.

Book: 8.3.3 several machines emulated on one host.

Used in: chapters/08_dgl_practice.ipynb.

DGL 2.1.0 assumes one partition per host.  Two things break when K
partitions share a host:

1. **machine id**: a client finds its machine id by looking for one of the
   host's IP addresses in the ip_config; on one host every client matches the
   first line and believes it is machine 0;
2. **shared-memory names**: each machine's main server copies its partition
   (graph, partition book, feature tensors) into POSIX shared memory under
   names made from the graph and tensor names only, so the K servers of one
   host overwrite each other's segments.

The launcher solves both by setting two variables for every process of an
emulated machine, and putting :mod:`gnnbook.distributed._site` on ``PYTHONPATH``:

- ``GNNBOOK_MACHINE_ID``: the machine id the client reports (instead of the
  IP-address lookup);
- ``GNNBOOK_SHM_PREFIX``: a prefix, unique to the job and machine, put in
  front of every shared-memory name DGL creates or opens.

``_site/sitecustomize.py`` runs at the start of every Python process on that
path (trainers, servers, DGL's spawned sampler processes, an unmodified
DistDGL script) and, only when one of the variables is set, calls
:func:`install`, which patches DGL right after ``dgl.distributed`` is
imported.  Nothing else in DGL changes, and the prefix makes every segment of
a job recognisable, so the launcher can delete exactly the job's segments
(:func:`remove_segments`) after a crash.

The adaptation must never be silently absent (``python -E`` or ``-I``, an
interpreter without gnnbook, a wrapper that drops ``PYTHONPATH``, another
``sitecustomize`` first on the path): then every client believes it is
machine 0 and the servers overwrite each other's segments.  So the launcher
also sets ``GNNBOOK_EMULATION=required``; ``sitecustomize`` exits with a message
when it cannot import gnnbook, :func:`verify` (called by the gnnbook trainer in
every server and trainer) names the cause when the patch is missing or the
machine id and partition disagree, and :func:`preflight` runs the same check
in the job's interpreter before anything starts (every local start: ``dist-train``,
``launch``, :class:`~gnnbook.distributed.cluster.LocalCluster`), found through
``env`` and a script's ``#!`` line as well.
Our ``sitecustomize`` runs the one it shadows (the next on ``sys.path``).

With root, :mod:`gnnbook.distributed.netns` runs stock DGL instead: one network and
mount namespace (own IP, private ``/dev/shm``) per emulated machine.

Example:
    >>> prefixed("/cora_node_feat", "job1m0_")
    '/job1m0_cora_node_feat'
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from ..base import reaper

MACHINE_ENV = "GNNBOOK_MACHINE_ID"
PREFIX_ENV = "GNNBOOK_SHM_PREFIX"
REQUIRED_ENV = "GNNBOOK_EMULATION"  # "required": this process must run with the adaptation
SITE_DIR = Path(__file__).resolve().parent / "_site"
SHM_DIR = Path("/dev/shm")


def prefixed(name: str, prefix: str) -> str:
    """``name`` with ``prefix`` after its optional leading slash."""
    if not prefix or name.lstrip("/").startswith(prefix):
        return name
    return "/" + prefix + name[1:] if name.startswith("/") else prefix + name


def _patch_dgl() -> None:
    import dgl._ffi.ndarray as ffi_ndarray
    import dgl.distributed.dist_graph as dist_graph
    import dgl.distributed.graph_partition_book as gpb
    import dgl.distributed.kvstore as kvstore
    import dgl.distributed.rpc_client as rpc_client
    import dgl.distributed.shared_mem_utils as shm_utils
    import dgl.heterograph_index as hgi
    import dgl.ndarray as ndarray

    global _PATCHED
    prefix = os.environ.get(PREFIX_ENV, "")
    machine = os.environ.get(MACHINE_ENV)
    if machine is not None:
        rpc_client.get_local_machine_id = lambda server_namebook: int(machine)
    _PATCHED = True
    if not prefix or getattr(hgi, "_gnnbook_patched", False):
        return
    empty, exists = ffi_ndarray.empty_shared_mem, ndarray.exist_shared_mem_array
    to_shm, from_shm = hgi.HeteroGraphIndex.shared_memory, hgi.create_heterograph_from_shared_memory

    def empty_shared_mem(name, is_create, shape, dtype):
        return empty(prefixed(name, prefix), is_create, shape, dtype)

    def exist_shared_mem_array(name):
        return exists(prefixed(name, prefix))

    def shared_memory(self, name, *args, **kwargs):
        return to_shm(self, prefixed(name, prefix), *args, **kwargs)

    def create_heterograph_from_shared_memory(name):
        return from_shm(prefixed(name, prefix))

    for module in (ffi_ndarray, ndarray, shm_utils, kvstore, gpb, dist_graph):
        if hasattr(module, "empty_shared_mem"):
            module.empty_shared_mem = empty_shared_mem
        if hasattr(module, "exist_shared_mem_array"):
            module.exist_shared_mem_array = exist_shared_mem_array
    hgi.HeteroGraphIndex.shared_memory = shared_memory
    hgi.create_heterograph_from_shared_memory = create_heterograph_from_shared_memory
    hgi._gnnbook_patched = True


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Run :func:`_patch_dgl` as soon as ``dgl.distributed`` has been imported."""

    target = "dgl.distributed"

    def find_spec(self, fullname, path, target=None):
        if fullname != self.target:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        self._inner = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
        _patch_dgl()


_INSTALLED = False  # install() ran in this process (our sitecustomize called it)
_PATCHED = False  # DGL has been patched in this process


def install() -> None:
    """Patch DGL now if it is imported, else right after its import."""
    global _INSTALLED
    _INSTALLED = True
    if "dgl.distributed" in sys.modules:
        _patch_dgl()
    elif not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())


class EmulationError(RuntimeError):
    """A process of an emulated job runs without the adaptation, or on the wrong partition."""


def required() -> bool:
    """Whether the launcher said that this process must run adapted."""
    return os.environ.get(REQUIRED_ENV) == "required"


# What decides whether the adaptation is active, gathered in the process itself.  Standard
# library only: preflight() runs it in the job's interpreter, which may lack gnnbook.
_FACTS = """
import json, os, sys
emulation = sys.modules.get("gnnbook.distributed.emulation")
print(json.dumps(dict(isolated=sys.flags.isolated, ignore_environment=sys.flags.ignore_environment,
                      no_site=sys.flags.no_site, path=sys.path, pythonpath=os.environ.get("PYTHONPATH"),
                      sitecustomize=getattr(sys.modules.get("sitecustomize"), "__file__", None),
                      installed=bool(getattr(emulation, "_INSTALLED", False)))))
"""


def _process_facts() -> dict:
    import contextlib
    import io
    import json

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(_FACTS, {})
    return json.loads(out.getvalue())


def missing_cause(facts: dict | None = None) -> str | None:
    """Why the adaptation is not active in this process, or in the process
    ``facts`` describe (see :func:`preflight`); None when it is active."""
    facts = facts or _process_facts()
    if facts["installed"]:
        return None
    if facts["isolated"]:
        return "Python runs isolated (-I), which ignores PYTHONPATH and so gnnbook's sitecustomize"
    if facts["ignore_environment"]:
        return "Python runs with -E, which ignores PYTHONPATH and so gnnbook's sitecustomize"
    if facts["no_site"]:
        return "Python runs with -S, which skips every sitecustomize"
    if str(SITE_DIR) not in facts["path"]:
        return (f"{SITE_DIR} is not on sys.path: something between the launcher and this process dropped or "
                f"replaced PYTHONPATH (it is {facts['pythonpath'] or 'unset'!r})")
    other = facts["sitecustomize"]
    if other and Path(other).resolve().parent != SITE_DIR:
        return f"another sitecustomize ({other}) comes before gnnbook's on sys.path and shadows it"
    return "gnnbook's sitecustomize did not run in this process"


def verify(partition_id: int | None = None) -> None:
    """Raise :class:`EmulationError` if this process belongs to an emulated job
    but runs unadapted, or if its machine id differs from ``partition_id`` (the
    partition it serves or trains on).  Nothing to check outside such a job.

    Example:
        >>> verify()  # not in an emulated job: nothing to check
    """
    if not required():
        return
    cause = missing_cause()
    if cause is not None:
        raise EmulationError(_inactive(cause))
    machine = int(os.environ[MACHINE_ENV])
    if partition_id is not None and int(partition_id) != machine:
        raise EmulationError(f"this process runs as emulated machine {machine} but holds partition {partition_id}; "
                             "each machine must serve and train on its own partition (the launcher's "
                             f"{MACHINE_ENV} and the partition book disagree)")


def preflight(command: list[str], env: dict[str, str]) -> None:
    """Run :func:`verify` in the interpreter ``command`` starts (its Python
    options included) with the job's environment ``env``, before any process of
    the job starts; raise :class:`EmulationError` with the cause.  The
    interpreter is found as the kernel and ``env`` would find it
    (:func:`probe_command`): ``python3 -X dev train.py``, ``/usr/bin/env -i python3
    train.py``, or ``./train.py`` whose first line is ``#!/usr/bin/python3 -I``.
    A command that starts no Python that way (a binary, a shell script) is left
    alone: its Python processes are checked by ``sitecustomize`` and :func:`verify`.

    Example:
        >>> preflight(["python3", "-I", "train.py"], emulation_env("gnnbook1x000000", 0))  # doctest: +SKIP
        Traceback (most recent call last):
        EmulationError: ... Python runs isolated (-I) ...
    """
    import json

    probe = probe_command(command)
    if probe is None:
        return
    try:
        done = subprocess.run(probe, env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
    except OSError as err:  # a #! line naming an interpreter that is not there
        raise EmulationError(f"`{shlex.join(command)}` cannot run in an emulated job: its interpreter "
                             f"{probe[0]} cannot be started ({err.strerror or err})") from None
    except subprocess.TimeoutExpired:
        raise EmulationError(f"`{shlex.join(command)}`: its interpreter ({probe[0]}) did not report within 60 s "
                             "whether the adaptation is active") from None
    if done.returncode != 0:  # our sitecustomize exits when it cannot import gnnbook
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        raise EmulationError(f"`{shlex.join(command)}` cannot run in an emulated job: "
                             f"{lines[-1] if lines else 'its interpreter exited ' + str(done.returncode)}")
    try:
        facts = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise EmulationError(f"`{shlex.join(command)}` cannot run in an emulated job: its interpreter "
                             f"({probe[0]}) did not report whether the adaptation is active "
                             f"(output {done.stdout.strip()[-200:]!r})") from None
    cause = missing_cause(facts)
    if cause is not None:
        raise EmulationError(f"`{shlex.join(command)}`: " + _inactive(cause))


_ENV_WITH_VALUE = ("-u", "--unset", "-C", "--chdir")


def probe_command(command: list[str], depth: int = 0) -> list[str] | None:
    """What :func:`preflight` runs: ``command`` up to its Python interpreter and the
    interpreter's options, then ``-c <the check>``; None if ``command`` starts no
    Python interpreter that can be found without running it.  Followed, as the
    kernel and ``env`` do: ``env`` with its options and assignments (``-S``
    split as ``env`` splits it), and a script's ``#!`` line (its one argument).

    Example:
        >>> probe_command(["/usr/bin/env", "-u", "X", "python3", "-X", "dev", "t.py"])[:6]
        ['/usr/bin/env', '-u', 'X', 'python3', '-X', 'dev']
        >>> probe_command(["bash", "run.sh"]) is None
        True
    """
    if not command or depth > 4:  # a chain of #! lines this deep is a loop
        return None
    name = Path(command[0]).name
    if re.fullmatch(r"python[0-9.]*", name):
        return [command[0], *_python_options(command), "-c", _FACTS]
    if name == "env":
        words, i = list(command), 1
        while i < len(words):
            word = words[i]
            if word in ("-S", "--split-string") or word.startswith(("-S", "--split-string=")):
                value = (words[i + 1] if i + 1 < len(words) else "") if word in ("-S", "--split-string") \
                    else word.split("=", 1)[1] if word.startswith("--") else word[2:]
                end = i + 2 if word in ("-S", "--split-string") else i + 1
                words[i:end] = shlex.split(value)
                continue
            if word == "--":
                i += 1
                break
            if word in _ENV_WITH_VALUE:
                i += 2
            elif word.startswith("-") or ("=" in word and not word.startswith("=")):
                i += 1
            else:
                break
        rest = probe_command(words[i:], depth + 1)
        return None if rest is None else words[:i] + rest
    script = command[0] if "/" in command[0] else shutil.which(command[0])
    try:
        with open(script or "", "rb") as handle:
            first = handle.readline(256)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    # The kernel splits the #! line once: the interpreter, then at most one argument.
    interpreter, _, argument = first[2:].decode(errors="replace").strip().partition(" ")
    argument = argument.strip()
    return probe_command([interpreter, *([argument] if argument else []), script, *command[1:]], depth + 1)


def _inactive(cause: str) -> str:
    return (f"this process is part of a job of K emulated machines on one host, but the DGL adaptation is not "
            f"active: {cause}.  Without it every trainer believes it is machine 0 and the servers overwrite each "
            "other's shared memory.  Fix: run the script with a plain `python` that can import gnnbook, and keep "
            f"the PYTHONPATH the launcher sets (it starts with {SITE_DIR}).")


def _python_options(command: list[str]) -> list[str]:
    """The interpreter options of ``python [OPTIONS] script ...`` (``-X dev``, ``-W error``
    and ``-Wd`` included)."""
    options, words = [], iter(command[1:])
    for word in words:
        if not word.startswith("-") or word == "-" or word.startswith(("-c", "-m")):
            break
        options.append(word)
        if word in ("-X", "-W"):  # the value is the next word
            options.append(next(words, ""))
    return options


def site_path() -> str:
    """PYTHONPATH with gnnbook's sitecustomize folder first (the rest as this process has it)."""
    path = [str(SITE_DIR)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys(path))


def emulation_env(job_tag: str, machine_id: int) -> dict[str, str]:
    """The variables that make a process part of emulated machine ``machine_id``."""
    return {MACHINE_ENV: str(machine_id), PREFIX_ENV: f"{job_tag}m{machine_id}_", REQUIRED_ENV: "required",
            "PYTHONPATH": site_path()}


def new_job_tag() -> str:
    """``gnnbook<pid>x<random>``: unique, and names the supervising process."""
    return f"gnnbook{os.getpid()}x{os.urandom(3).hex()}"


def _unlink(paths) -> list[str]:
    removed = []
    for path in paths:
        try:
            path.unlink()
            removed.append(path.name)
        except OSError:
            pass
    return removed


def remove_stale_segments() -> list[str]:
    """Delete segments of jobs whose supervising process is gone (it was killed
    before it could clean up) and that no live process maps; return their names.
    The pid in a tag alone is no proof: a job supervised from another PID
    namespace carries a pid that means nothing here, while its servers map the
    segments."""
    if not SHM_DIR.is_dir():
        return []
    pattern = re.compile(r"gnnbook(\d+)x[0-9a-f]{6}")
    orphans = [p for p in SHM_DIR.iterdir()
               if (m := pattern.match(p.name)) and not Path(f"/proc/{m.group(1)}").exists()]
    if not orphans:
        return []
    mapped = reaper.mapped_inodes()

    def unmapped(path: Path) -> bool:
        try:
            return path.stat().st_ino not in mapped
        except OSError:  # gone meanwhile
            return False

    return _unlink(p for p in orphans if unmapped(p))


def job_segments(job_tag: str) -> list[Path]:
    """The shared-memory segments a job with ``job_tag`` left in /dev/shm."""
    if not SHM_DIR.is_dir():
        return []
    return sorted(p for p in SHM_DIR.iterdir() if job_tag in p.name)


def remove_segments(job_tag: str) -> list[str]:
    """Delete the job's segments; return their names."""
    return _unlink(job_segments(job_tag))
