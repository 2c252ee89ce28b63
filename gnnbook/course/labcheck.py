"""Lab checks that only a real solution passes: the reference implementations a
check compares with are forbidden while the student's code runs.

Book: none (lab checks).

Used in: labs/lab02_message_passing.ipynb, labs/lab05b_historical_embeddings.ipynb,
labs/lab10_recommendation.ipynb, labs/lab11_spatiotemporal_index_batching.ipynb,
labs/lab12_feature_loading.ipynb.

A lab that asks for a GCN layer compares it with DGL's ``GraphConv``; a student
function that simply calls ``GraphConv`` (or the package's ``GCN``) would pass
that comparison without implementing anything.  :func:`reference_forbidden`
replaces the named methods, for the duration of a ``with`` block, by a function
that raises :class:`ReferenceCallError` with a message saying what to do instead.

Example:
    >>> import dgl.nn as dglnn, torch
    >>> conv = dglnn.GraphConv(2, 2)
    >>> with reference_forbidden(GCN_REFERENCES):
    ...     try:
    ...         conv(None, torch.zeros(1, 2))
    ...     except ReferenceCallError as error:
    ...         print("refused:", str(error).split(" is ")[0])
    refused: dgl.nn.pytorch.conv.graphconv:GraphConv.forward
"""
from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterable, Iterator

# What a student's GCN layer must not call: DGL's layer and its normaliser, and the package's models.
GCN_REFERENCES: tuple[str, ...] = (
    "dgl.nn.pytorch.conv.graphconv:GraphConv.forward",
    "dgl.nn.pytorch.conv.graphconv:EdgeWeightNorm.forward",
    "gnnbook.models:GCN.forward",
    "gnnbook.models:VGAE.encode",
)


class ReferenceCallError(AssertionError):
    """A lab's solution called the reference implementation its check compares with."""


# What a student's GNNAutoScale history (lab 5b) must not call: the package's table and its forward.
HISTORY_REFERENCES: tuple[str, ...] = (
    "gnnbook.ch5_minibatch.history:History.push",
    "gnnbook.ch5_minibatch.history:History.pull",
    "gnnbook.ch5_minibatch.history:gcn_forward",
)


def _resolve(target: str) -> tuple[type, str]:
    module_name, _, path = target.partition(":")
    owner_name, _, attribute = path.rpartition(".")
    if not module_name or not attribute:
        raise ValueError(f"reference {target!r} must look like 'package.module:Class.method' "
                         "or 'package.module:function'")
    owner = importlib.import_module(module_name)
    for part in filter(None, owner_name.split(".")):   # no owner: a module-level function
        owner = getattr(owner, part)
    if not hasattr(owner, attribute):
        raise ValueError(f"reference {target!r}: {owner_name} has no attribute {attribute!r}")
    return owner, attribute


@contextlib.contextmanager
def reference_forbidden(targets: Iterable[str], hint: str = "implement it yourself with message passing "
                        "(update_all) or a sparse-matrix product") -> Iterator[None]:
    """Inside the block, calling any of ``targets`` ('module:Class.method' or 'module:function')
    raises :class:`ReferenceCallError`; the originals are restored afterwards."""
    saved = []
    try:
        for target in targets:
            owner, attribute = _resolve(target)
            saved.append((owner, attribute, owner.__dict__.get(attribute)))

            def refuse(*args, _target=target, **kwargs):
                raise ReferenceCallError(f"{_target} is the reference implementation this check compares with; "
                                         f"calling it does not count: {hint}")

            setattr(owner, attribute, refuse)
        yield
    finally:
        for owner, attribute, original in reversed(saved):
            if original is None:
                delattr(owner, attribute)
            else:
                setattr(owner, attribute, original)
