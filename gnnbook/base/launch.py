"""Run a function in ``world_size`` real OS processes joined by torch.distributed (gloo, CPU).

Book: 3.2 the distributed training flow (real ranks joined by torch.distributed).

Used in: chapters/03_distributed_ml.ipynb, chapters/05c_execution_engine.ipynb,
chapters/05d_communication.ipynb, chapters/05g_historical_embeddings.ipynb,
chapters/06a_fullgraph_parallelism.ipynb, labs/lab03_collectives.ipynb,
labs/lab11_spatiotemporal_index_batching.ipynb.

A spawned process cannot import a notebook cell, so the function lives in a
module and is named by a string: ``"package.module:function"`` or
``"/path/to/file.py:function"`` (a file, e.g. one a lab wrote with
``%%writefile``).  Each rank is a ``python -m gnnbook.base.worker``
process started by :class:`gnnbook.base.procs.ProcessGroup`, so the job has a
deadline, the first failure kills every rank and raises
:class:`gnnbook.base.procs.ProcessFailed` naming the rank (``'rank1'``), and
nothing is left running (a rank still hanging near the deadline first writes
the Python stack of every thread to its log, which the error shows).  Ranks
leave together through the store, never while a peer still waits on a
message.  Each rank's return value comes back through a file
written with ``torch.save`` and read with ``torch.load(weights_only=True)``:
return tensors, numbers, strings, lists/tuples/dicts of them, and dataclasses declared
with :func:`gnnbook.base.records.record` (they come back as the same class).

The rendezvous store is opened here, in the caller, on a port the kernel
chooses (port 0), so no other process can take the port between choosing and
using it; the ranks join it as clients.

Example:
    >>> results = run("gnnbook.base.worker:rank_and_size", world_size=2, deadline_s=60)
    >>> [r["rank"] for r in results]
    [0, 1]
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

from .procs import ProcessFailed, ProcessGroup
from .records import from_plain

__all__ = ["run", "run_sequence", "start_ranks", "free_port", "check_spec", "ProcessFailed", "PEER_EXIT_GRACE_S"]

# Ranks leave together (gnnbook.base.worker.leave_together): once one rank has exited 0, every peer
# has finished its function and exits within moments.  A peer still running this long after is
# waiting for a rank that left early (e.g. one that called os._exit(0)), so the job stops then
# instead of at its deadline.
PEER_EXIT_GRACE_S = 20.0


def _loopback_interface() -> str:
    """The name of the loopback interface (``lo`` on Linux), for ``GLOO_SOCKET_IFNAME``."""
    for _, name in socket.if_nameindex():
        if name.startswith("lo"):
            return name
    return "lo"


LOOPBACK_INTERFACE = _loopback_interface()


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (bind to port 0, read it, close).
    Only for code that must open its own rendezvous (``init_dist=False``);
    :func:`run` avoids the race by keeping its store open instead."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, 0))
        return sock.getsockname()[1]


def check_spec(fn: str) -> None:
    """Refuse a function spec that cannot be loaded, before any process starts."""
    module, sep, name = fn.rpartition(":")
    if not sep or not module or not name.isidentifier():
        raise ValueError(f"fn must look like 'package.module:function' or '/path/file.py:function', got {fn!r}")
    if module.endswith(".py") and not Path(module).is_file():
        raise FileNotFoundError(f"fn names the file {module!r}, which does not exist; write it first "
                                "(e.g. %%writefile)")


def start_ranks(group: ProcessGroup, fn: str, world_size: int, args_path: Path, result_path: str | Path, port: int,
                deadline_s: float, threads_per_rank: int = 1, init_dist: bool = True,
                env: dict[str, str] | None = None) -> None:
    """Start ``world_size`` ranks ``python -m gnnbook.base.worker fn args_path result`` in ``group``, each told
    its rank, the rendezvous on loopback ``port`` and the group's deadline; ``result_path`` may hold ``{rank}``.

    More than 8 parameters: each is one setting of the ranks' processes, which its two callers (run and the
    pool) pass on from their own arguments.
    """
    for rank in range(world_size):
        group.start(f"rank{rank}", [
            sys.executable, "-m", "gnnbook.base.worker", fn, str(args_path), str(result_path).format(rank=rank),
        ], env={
            **(env or {}), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "RANK": str(rank), "WORLD_SIZE": str(world_size), "GNNBOOK_INIT_DIST": str(int(init_dist)),
            "GNNBOOK_DEADLINE_S": str(deadline_s), "GNNBOOK_DEADLINE_AT": repr(group.deadline),
            "OMP_NUM_THREADS": str(threads_per_rank),
            # gloo listens on the address the host name resolves to unless pinned: loopback only
            "GLOO_SOCKET_IFNAME": LOOPBACK_INTERFACE,
            "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])),
        })


def run(fn: str, world_size: int, args: dict[str, Any] | None = None, deadline_s: float = 60.0,
        threads_per_rank: int = 1, init_dist: bool = True, log_dir: str | Path | None = None,
        env: dict[str, str] | None = None) -> list[Any]:
    """Call ``fn(**args)`` in ``world_size`` processes; return the per-rank results, rank order.

    In each rank ``torch.distributed`` is already initialised (gloo, ranks
    ``0..world_size-1``; read them with ``dist.get_rank()``) unless
    ``init_dist=False``, in which case the ranks get ``MASTER_ADDR``,
    ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE`` and may call
    ``dist.init_process_group("gloo")`` themselves.  ``args`` must be JSON.
    ``threads_per_rank`` sets torch's intra-op threads (1 keeps ranks from
    fighting over a small machine's cores).  Raises :class:`ProcessFailed`
    naming the first rank that failed, or the ranks still running at the deadline.

    Example:
        >>> run("gnnbook.base.worker:rank_and_size", 2, deadline_s=60)[1]["world_size"]
        2
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    check_spec(fn)
    args_json = json.dumps(args or {})  # fails here, clearly, on arguments that are not JSON
    work = Path(tempfile.mkdtemp(prefix="gnnbook-run-"))
    store = None
    try:
        if init_dist:
            import torch.distributed as dist

            store = dist.TCPStore("127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False)
            port = store.port
        else:
            port = free_port()
        (work / "args.json").write_text(args_json)
        with ProcessGroup(deadline_s=deadline_s, log_dir=log_dir or work / "logs",
                          peer_exit_grace_s=PEER_EXIT_GRACE_S) as group:
            group.remove_on_death(work)     # the launcher killed by SIGKILL: its watchdog removes the folder
            start_ranks(group, fn, world_size, work / "args.json", work / "result{rank}.pt", port, deadline_s,
                        threads_per_rank, init_dist, env)
            group.wait()
        import torch

        return [from_plain(torch.load(work / f"result{rank}.pt", weights_only=True)) for rank in range(world_size)]
    finally:
        del store
        shutil.rmtree(work, ignore_errors=True)


def run_sequence(jobs: list[tuple[str, dict[str, Any]]], world_size: int, deadline_s: float = 120.0,
                 **kwargs: Any) -> list[list[Any]]:
    """Run several functions one after another in ONE launch (start-up, mostly
    ``import torch``, costs seconds per launch); returns one per-rank list per job.

    Example:
        >>> out = run_sequence([("gnnbook.base.worker:rank_and_size", {})] * 2, 2, deadline_s=60)
        >>> len(out), len(out[0])
        (2, 2)
    """
    results = run("gnnbook.base.worker:sequence", world_size, {"jobs": [list(j) for j in jobs]},
                  deadline_s=deadline_s, **kwargs)
    return [[results[rank][i] for rank in range(world_size)] for i in range(len(jobs))]
