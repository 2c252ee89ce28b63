"""Typed results across processes (gnnbook.base.records): a declared dataclass survives the
torch.save / torch.load(weights_only=True) round trip as itself; nothing undeclared is built."""
import io

import pytest
import torch

from gnnbook.base.records import RECORD_KEY, from_plain, to_plain
from gnnbook.ch6_fullgraph.spmm import OperatorRank


def _through_a_file(value):
    buffer = io.BytesIO()
    torch.save(to_plain(value), buffer)
    buffer.seek(0)
    return from_plain(torch.load(buffer, weights_only=True))


def test_a_declared_record_comes_back_as_itself_with_its_tensors():
    run = OperatorRank(rank=1, mode="2d", ordering="metis", losses=[1.5, 1.2], epoch_wire_sent=[10, 10],
                       epoch_model=[{"wire_sent": 10}], timeline=[{"compute_s": 0.1}], sizes=[3, 2],
                       val_acc=0.5, test_acc=0.25, weights={"W1": torch.arange(6.0).view(2, 3)})
    back = _through_a_file([run, {"nested": (run,)}])
    assert isinstance(back[0], OperatorRank) and isinstance(back[1]["nested"][0], OperatorRank)
    assert back[0].losses == run.losses and torch.equal(back[0].weights["W1"], run.weights["W1"])


def test_an_undeclared_dataclass_cannot_leave_a_rank():
    from dataclasses import dataclass

    @dataclass
    class Loose:
        x: int

    with pytest.raises(TypeError, match="not declared with @record"):
        to_plain(Loose(1))


def test_names_outside_the_allow_list_are_refused():
    with pytest.raises(ValueError, match="outside the gnnbook package"):
        from_plain({RECORD_KEY: "os:system", "command": "true"})
    # a gnnbook class that exists but is not a declared record (the halo plan) is refused too
    with pytest.raises(ValueError, match="not declared with @record"):
        from_plain({RECORD_KEY: "gnnbook.ch6_fullgraph.subgraph:Plan"})

