"""Parallel training forms on real processes (torch.distributed, gloo, CPU).

- :func:`run` / :func:`run_sequence` (``launch``): start ranks as OS processes
  through :class:`gnnbook.procs.ProcessGroup`, with a deadline; results come back.
- ``data_parallel``: gradient all-reduce (DDP) and a parameter server
- ``model_parallel``: layers on different ranks, send/recv of activations and gradients
- ``pipeline``: GPipe micro-batches, measured bubble fraction
- ``tensor_parallel``: Megatron column/row-split MLP
- ``expert_parallel``: top-1 mixture of experts with all-to-all dispatch
- ``sharded``: fully sharded data parallel (parameters, gradients, Adam state)
- ``sync``: BSP / ASP / SSP on a parameter server with a straggler
- ``toy``: the seeded problem and the one-process reference

Example:
    >>> from gnnbook.parallel import run
    >>> [r["rank"] for r in run("gnnbook.parallel.worker:rank_and_size", 2, deadline_s=60)]
    [0, 1]
"""
from gnnbook.parallel.launch import ProcessFailed, free_port, run, run_sequence

__all__ = ["run", "run_sequence", "free_port", "ProcessFailed"]
