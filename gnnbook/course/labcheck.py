"""Lab checks that only a real solution passes: the reference implementations a
check compares with are refused while the student's code runs.

Book: none (lab checks).

Used in: no notebook (every shipped lab is graded outside the kernel; a teacher's own lab without
``CHECKS`` still runs its checks in the kernel with these refusals, and tests/test_no_spoilers.py reads the lists).

A lab that asks for a GCN layer compares it with DGL's ``GraphConv``; a student
function that simply calls ``GraphConv`` (or the package's ``GCN``, or PyG's
``GCNConv``) would pass that comparison without implementing anything.
:func:`reference_forbidden` makes the named functions raise
:class:`ReferenceCallError` for the duration of a ``with`` block, with a message
saying what to do instead.  It swaps the function's *code*, not the attribute
that names it, so a reference bound before the check (``f = GraphConv.forward``),
imported under another name or fetched through :mod:`importlib` is refused too.
:data:`LAB_REFERENCES` lists, per lab, every implementation in the package, DGL
and PyG that computes what the lab asks for.

Example:
    >>> import dgl.nn as dglnn, torch
    >>> conv = dglnn.GraphConv(2, 2)
    >>> early = dglnn.GraphConv.forward          # bound before the check
    >>> with reference_forbidden(GCN_REFERENCES):
    ...     try:
    ...         early(conv, None, torch.zeros(1, 2))
    ...     except ReferenceCallError as error:
    ...         print("refused:", str(error).split(" is ")[0])
    refused: dgl.nn.pytorch.conv.graphconv:GraphConv.forward
"""
from __future__ import annotations

import contextlib
import importlib
import os
import types
from collections.abc import Iterable, Iterator


def module_functions(module_name: str) -> tuple[str, ...]:
    """Every function defined in ``module_name``, as targets for :func:`reference_forbidden`.

    >>> "gnnbook.ch5_minibatch.caching:top_ranked" in module_functions("gnnbook.ch5_minibatch.caching")
    True
    """
    module = importlib.import_module(module_name)
    return tuple(f"{module_name}:{name}" for name, value in sorted(vars(module).items())
                 if isinstance(value, types.FunctionType) and value.__module__ == module_name)


# What a student's GCN layer (lab 2) must not call: DGL's and PyG's layers and normalisers, the
# package's models, its programming-model layers (chapter 7) and its one GCN normalisation (graph basics).
GCN_REFERENCES: tuple[str, ...] = (
    "dgl.nn.pytorch.conv.graphconv:GraphConv.forward",
    "dgl.nn.pytorch.conv.graphconv:EdgeWeightNorm.forward",
    "torch_geometric.nn.conv.gcn_conv:GCNConv.forward",
    "torch_geometric.nn.conv.gcn_conv:gcn_norm",
    "gnnbook.models:GCN.forward",
    "gnnbook.models:VGAE.encode",
    "gnnbook.ch7_systems.progmodels:tensor_centric",
    "gnnbook.ch7_systems.progmodels:graph_centric",
    "gnnbook.ch7_systems.progmodels:vertex_centric",
    "gnnbook.ch7_systems.progmodels:layer",
    "gnnbook.graph.normalisation:inverse_sqrt_degrees",
    "gnnbook.graph.normalisation:gcn_edge_weights",
    "gnnbook.graph.normalisation:gcn_dense_adjacency",
)

# What a student's GNNAutoScale history (lab 5b) must not call: the package's table and its forward.
HISTORY_REFERENCES: tuple[str, ...] = (
    "gnnbook.ch5_minibatch.history:History.push",
    "gnnbook.ch5_minibatch.history:History.pull",
    "gnnbook.ch5_minibatch.history:gcn_forward",
)

# torch's collectives (the Python functions and the process group's own methods): anything that sums
# across ranks without the student's messages.
TORCH_COLLECTIVES: tuple[str, ...] = tuple(
    [f"torch.distributed.distributed_c10d:{name}" for name in (
        "all_reduce", "all_reduce_coalesced", "reduce", "reduce_scatter", "reduce_scatter_tensor", "all_gather",
        "all_gather_into_tensor", "all_gather_coalesced", "broadcast", "all_to_all", "all_to_all_single",
        "gather", "scatter")]
    + [f"torch._C._distributed_c10d:{owner}.{name}" for owner in ("ProcessGroup", "Backend") for name in (
        "allreduce", "allreduce_coalesced", "reduce", "reduce_scatter", "allgather", "allgather_coalesced",
        "broadcast", "alltoall", "alltoall_base", "gather", "scatter")])

# Lab name -> what computes the lab's answers (every task); a lab's checks refuse all of it.
LAB_REFERENCES: dict[str, tuple[str, ...]] = {
    # lab 2: the GCN layers and normalisers, and the package's ready-made D^-1/2 (A + I) D^-1/2 of a graph
    "lab02_message_passing": (*GCN_REFERENCES, "gnnbook.ch6_fullgraph.spmm:normalised_adjacency",
                              "gnnbook.ch6_fullgraph.subgraph:local_graph"),
    "lab03_collectives": ("gnnbook.comm.algorithms:ring_all_reduce", "gnnbook.comm.algorithms:tree_all_reduce",
                          "gnnbook.comm.algorithms:direct_all_reduce", *TORCH_COLLECTIVES),
    # lab 4: the package's minibatch step (its minibatch trainers and pipelined loop take it by default: they train
    # a model of their own, so none of them can make one step on the student's model but through it)
    "lab04_minibatch": ("gnnbook.training.minibatch:minibatch_step",),
    # lab 5: the package's pre-sampling: the distributed trainer's, and every function of the caching module,
    # whose policies, counters and rankers rebuild it (but belady_hits, Belady's bound, which chapter 5b prints;
    # lab 5's grading refuses it too)
    "lab05_feature_cache": ("gnnbook.distributed.feature_cache:presample_counts",
                            "gnnbook.distributed.feature_cache:select_cached_nodes",
                            *(target for target in module_functions("gnnbook.ch5_minibatch.caching")
                              if not target.endswith(":belady_hits"))),
    "lab05b_historical_embeddings": HISTORY_REFERENCES,
    "lab06_halo_exchange": ("gnnbook.ch6_fullgraph.subgraph:HaloExchange.forward",
                            "gnnbook.ch6_fullgraph.subgraph:HaloExchange.backward",
                            "gnnbook.ch6_fullgraph.protocols:Exchange.__call__",
                            "gnnbook.ch6_fullgraph.stale:PipeExchange.__init__"),
    "lab08_distributed_dgl": ("gnnbook.ch6_fullgraph.partitioners:partition_metrics",
                              "gnnbook.training.minibatch:full_graph_boundary",
                              "gnnbook.distributed.partition_files:load_partition"),
    # the package's BPR loss and LightGCN (LightGCNRanker's propagation too), PyG's BPRLoss and LGConv and what
    # gives D^-1/2 A D^-1/2 (gcn_norm, get_laplacian: h - L h), DGL's GraphConv and its other normalised layers
    "lab10_recommendation": (*GCN_REFERENCES, "gnnbook.applications.recsys:bpr_loss",
                             "gnnbook.applications.recsys:lightgcn_propagate",
                             "gnnbook.applications.recsys:normalised_adjacency",
                             "gnnbook.applications.recsys:LightGCNRanker.embeddings",
                             "gnnbook.applications.recsys:_SymmetricSpMM.forward",
                             "torch_geometric.nn.models.lightgcn:BPRLoss.forward",
                             "torch_geometric.nn.conv.lg_conv:LGConv.forward",
                             "torch_geometric.utils.laplacian:get_laplacian",
                             "dgl.nn.pytorch.conv.sgconv:SGConv.forward", "dgl.nn.pytorch.conv.tagconv:TAGConv.forward",
                             "dgl.nn.pytorch.conv.appnpconv:APPNPConv.forward"),
    # the package's windows (task 1) and the bytes its loaders say they hold (task 2 measures them)
    "lab11_spatiotemporal_index_batching": ("gnnbook.applications.temporal:IndexDataset.__getitem__",
                                            "gnnbook.applications.temporal:IndexDataset.batch",
                                            "gnnbook.applications.temporal:IndexDataset.nbytes",
                                            "gnnbook.applications.temporal:SnapshotDataset.nbytes"),
    # the package's gathers into a buffer (and the GPU paths built on them: pinned, zero-copy, DGL's UVA gather)
    # and its line count (LoadingModel.predict counts through it)
    "lab12_feature_loading": ("gnnbook.ch5_minibatch.feature_loading:gather_into",
                              "gnnbook.ch5_minibatch.feature_loading:pinned_to_device",
                              "gnnbook.ch5_minibatch.feature_loading:triton_gather",
                              "gnnbook.ch5_minibatch.feature_loading:zero_copy_gather",
                              "dgl.utils.pin_memory:gather_pinned_tensor_rows",
                              "gnnbook.ch5_minibatch.feature_loading:pcie_lines"),
}


class ReferenceCallError(AssertionError):
    """A lab's solution called the reference implementation its check compares with."""


# Set by the autograder for the kernels it starts: a check whose measurement cannot be taken then scores nothing.
GRADING_ENV = "GNNBOOK_GRADING"


class NotGradedHere(AssertionError):
    """A check's measurement cannot be taken on the grading machine: the check scores nothing, with this reason."""


def graded_measurement(available: bool, what: str) -> bool:
    """``available``, for a check that needs a measurement (exact memory, say): where it is not available and
    the notebook runs under the autograder, raise :class:`NotGradedHere`, so that the check scores nothing
    ("not graded here", with the reason) instead of passing unmeasured; a student's own run just skips it.

    >>> graded_measurement(True, "the memory budget")
    True
    """
    if not available and os.environ.get(GRADING_ENV) == "1":
        raise NotGradedHere(f"{what} is not graded here: the measurement it needs is not available on the grading "
                            "machine (the check scores nothing rather than pass unmeasured)")
    return available


def _resolve(target: str) -> tuple[object, str]:
    module_name, _, path = target.partition(":")
    owner_name, _, attribute = path.rpartition(".")
    if not module_name or not attribute:
        raise ValueError(f"reference {target!r} must look like 'package.module:Class.method' "
                         "or 'package.module:function'")
    owner = importlib.import_module(module_name)
    for part in filter(None, owner_name.split(".")):   # no owner: a module-level function
        owner = getattr(owner, part)
    if not hasattr(owner, attribute):
        raise ValueError(f"reference {target!r}: {owner_name or module_name} has no attribute {attribute!r}")
    return owner, attribute


def _function(owner: object, attribute: str) -> types.FunctionType | None:
    """The Python function behind ``owner.attribute`` (unwrapping static and class methods and a
    property's getter), if any."""
    value = owner.__dict__.get(attribute) if isinstance(owner, type) else getattr(owner, attribute)
    value = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
    return value if isinstance(value, types.FunctionType) else None


def _refusing_code(message: str, freevars: tuple[str, ...]) -> types.CodeType:
    """A code object that raises ReferenceCallError(message) and has the same free variables as the
    function it replaces (CPython requires that).  It reaches this module through ``__import__``
    because it runs with the replaced function's globals."""
    touch = "; ".join(freevars) or "pass"
    source = (f"def _outer():\n    {' = '.join(freevars) + ' = None' if freevars else 'pass'}\n"
              f"    def refuse(*args, **kwargs):\n        {touch}\n"
              f"        raise __import__({__name__!r}, fromlist=['_']).ReferenceCallError({message!r})\n"
              "    return refuse\n")
    namespace: dict = {}
    exec(compile(source, "<refused reference>", "exec"), namespace)
    code = namespace["_outer"]().__code__
    if code.co_freevars != freevars:
        raise ValueError(f"cannot refuse a closure over {freevars}")
    return code


@contextlib.contextmanager
def reference_forbidden(targets: Iterable[str], hint: str = "implement it yourself with message passing "
                        "(update_all) or a sparse-matrix product") -> Iterator[None]:
    """Inside the block, calling any of ``targets`` ('module:Class.method' or 'module:function')
    raises :class:`ReferenceCallError`, however the function was reached; everything is restored
    afterwards.  A Python function keeps its identity and gets a refusing code object; anything
    else (a C function) is replaced on its owner."""
    swapped: list[tuple[types.FunctionType, types.CodeType]] = []
    replaced: list[tuple[object, str, object]] = []
    try:
        for target in dict.fromkeys(targets):
            owner, attribute = _resolve(target)
            message = (f"{target} is the reference implementation this check compares with; "
                       f"calling it does not count: {hint}")
            function = _function(owner, attribute)
            if function is not None:
                while isinstance(function, types.FunctionType):   # a decorator's wrapper and what it wraps
                    swapped.append((function, function.__code__))
                    function.__code__ = _refusing_code(message, function.__code__.co_freevars)
                    function = getattr(function, "__wrapped__", None)
            else:
                def refuse(*args, _message=message, **kwargs):
                    raise ReferenceCallError(_message)

                replaced.append((owner, attribute, owner.__dict__.get(attribute)))
                setattr(owner, attribute, refuse)
        yield
    finally:
        for function, code in reversed(swapped):
            function.__code__ = code
        for owner, attribute, original in reversed(replaced):
            if original is None:
                delattr(owner, attribute)
            else:
                setattr(owner, attribute, original)
