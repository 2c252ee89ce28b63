"""The process side of :func:`gnnbook.base.launch.run`: one rank.

Book: 3.2 the distributed training flow (one rank's process).

Used in: chapters/03_distributed_ml.ipynb, labs/lab03_collectives.ipynb.

Command line (the launcher builds it)::

    python -m gnnbook.base.worker <module:function | file.py:function> <args.json> <result.pt>

with ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` in the
environment.  It joins the gloo group, calls the function with the JSON
arguments, and writes the return value with ``torch.save`` (to a temporary
name first, so a failed rank never leaves a half-written result).  The small
functions below are for tests and examples.

Example:
    >>> load_function("gnnbook.base.worker:rank_and_size").__name__
    'rank_and_size'
"""
from __future__ import annotations

import datetime
import importlib
import importlib.util
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

from .records import to_plain


def load_function(spec: str) -> Callable[..., Any]:
    """``"pkg.module:name"`` or ``"/path/to/file.py:name"`` -> the function."""
    module_name, _, name = spec.rpartition(":")
    if module_name.endswith(".py"):
        path = Path(module_name).resolve()
        loader_spec = importlib.util.spec_from_file_location(f"_gnnbook_user_{path.stem}", path)
        if loader_spec is None or loader_spec.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(loader_spec)
        loader_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    try:
        return getattr(module, name)
    except AttributeError:
        raise AttributeError(f"{module_name} has no function {name!r}") from None


_STORE = None  # the launcher's store, kept for the exit handshake


def function_file(fn: Callable[..., Any], folder: str | Path) -> str:
    """Write the notebook cell that defined ``fn`` to ``folder/<name>.py``; returns the
    ``"file.py:name"`` spec :func:`load_function` (so every rank) loads it from.

    A rank cannot import a notebook cell, so the cell's whole source travels (its imports and
    helpers with it; names from other cells do not).  Only a function defined in the notebook
    (module ``__main__``) is accepted: one imported from a package would be graded as if written
    here.  Book 3.2.

    >>> function_file(load_function, "/tmp")   # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: load_function is defined in ...worker, not in this notebook: define it in a cell of the notebook
    """
    import linecache

    name, module = getattr(fn, "__name__", repr(fn)), getattr(fn, "__module__", None)
    code = getattr(fn, "__code__", None)
    if module != "__main__" or code is None:
        raise ValueError(f"{name} is defined in {module}, not in this notebook: define it in a cell of the notebook")
    lines = linecache.getlines(code.co_filename)
    if not lines:
        raise ValueError(f"the source of {name} ({code.co_filename}) is not available: "
                         "run the cell that defines it again")
    path = Path(folder) / f"{name}.py"
    path.write_text("".join(lines))
    return f"{path}:{name}"


def init_from_env() -> None:
    """Join the group the launcher opened (its store is a client connection here)."""
    global _STORE
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=float(os.environ.get("GNNBOOK_DEADLINE_S", "60")))
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          int(os.environ["WORLD_SIZE"]), is_master=False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]), timeout=timeout)
    _STORE = store


def leave_together() -> None:
    """Tear down only when every rank is done.  A gloo barrier is not enough:
    a rank that passes it first and exits can reset a connection on which a
    slower peer still has the barrier's last message unread, and that peer
    then waits forever.  The launcher's store outlives all ranks, so counting
    finished ranks there is safe."""
    world = int(os.environ["WORLD_SIZE"])
    _STORE.add("gnnbook/finished", 1)
    while _STORE.add("gnnbook/finished", 0) < world:
        time.sleep(0.01)
    # No destroy_process_group(): gloo's teardown can wait forever on a connection that a peer, already
    # gone, has closed (2 hangs in 12 runs of tests/test_algorithms.py's fusion test).  The caller ends
    # the process at once instead (os._exit), and the kernel closes its sockets.


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    spec, args_path, result_path = argv
    import faulthandler

    import torch

    # If this rank hangs, its log shows where, shortly before the launcher's deadline stops it.
    # (CLOCK_MONOTONIC is shared by all processes of a Linux machine.)
    deadline_at = float(os.environ.get("GNNBOOK_DEADLINE_AT", time.monotonic() + 60))
    faulthandler.dump_traceback_later(max(deadline_at - time.monotonic() - 2, 1), exit=False)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the launcher asks for stacks before it kills
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    fn = load_function(spec)
    args = json.loads(Path(args_path).read_text())
    init_dist = os.environ.get("GNNBOOK_INIT_DIST", "1") == "1"
    if init_dist:
        init_from_env()
    result = fn(**args)
    tmp = Path(result_path + ".tmp")
    torch.save(to_plain(result), tmp)  # declared records as plain dicts (gnnbook.base.records)
    tmp.rename(result_path)
    faulthandler.cancel_dump_traceback_later()
    if init_dist:
        leave_together()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # skips gloo's teardown at interpreter exit too (see leave_together)
    return 0


# ----- small functions for examples and tests -----

def rank_and_size() -> dict[str, int]:
    import torch.distributed as dist

    return {"rank": dist.get_rank(), "world_size": dist.get_world_size()}


def rank_and_pid() -> dict[str, int]:
    """This rank and its process id (a pool's jobs run in the same processes)."""
    import torch.distributed as dist

    return {"rank": dist.get_rank(), "pid": os.getpid()}


def env_rendezvous() -> dict[str, int]:
    """For ``run(..., init_dist=False)``: join the group by itself from the
    environment (``env://``: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), as
    code that owns its initialisation (e.g. DistDGL) does."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    out = {"rank": dist.get_rank(), "sum": int(t.item())}
    dist.barrier()
    dist.destroy_process_group()
    return out


def sequence(jobs: list[list[Any]]) -> list[Any]:
    """Run ``[[spec, args], ...]`` in order in this rank; a barrier between jobs."""
    import torch.distributed as dist

    out = []
    for spec, args in jobs:
        dist.barrier()
        out.append(load_function(spec)(**args))
    return out


def fail_on_rank(rank: int, how: str = "raise", after_s: float = 0.5) -> str:
    """Make ``rank`` fail (``how="raise"`` an exception, ``"kill"`` SIGKILL itself,
    ``"hang"`` sleep forever) while the other ranks wait in an all-reduce."""
    import torch
    import torch.distributed as dist

    if dist.get_rank() == rank:
        time.sleep(after_s)
        if how == "raise":
            raise RuntimeError(f"injected failure on rank {rank}")
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        while True:
            time.sleep(1)
    dist.all_reduce(torch.ones(4))  # blocks: the failed rank never joins
    return "unreachable"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def exit_early_or_wait() -> None:
    """Rank 1 leaves at once with code 0, without its peers; rank 0 finishes and then waits in
    :func:`leave_together` for a rank that never comes.  The launcher must stop the job after its
    peer-exit grace, not at the deadline."""
    import torch.distributed as dist

    if dist.get_rank() == 1:
        os._exit(0)


def listening_sockets() -> dict[str, Any]:
    """This rank's listening TCP addresses and the interface gloo was pinned to."""
    import psutil

    listening = [c.laddr.ip for c in psutil.Process().net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN]
    return {"listening": listening, "gloo_ifname": os.environ.get("GLOO_SOCKET_IFNAME")}

