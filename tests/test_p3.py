"""P3's computation decomposition (5.2.4) on real processes: the same gradients as one process,
every socket byte explained, payload = formula; data-parallel feature pulling likewise."""
import pytest
import torch

from gnnbook.ch5_minibatch.p3 import build, reference_gradients
from gnnbook.base.launch import run

PHASE_OPS = {"p3": ("send", "recv"), "data_parallel": ("all_to_all",)}


def _gradients(out, mode):
    # P3: each machine holds its rows of W1 (zeros elsewhere); the other gradients are all-reduced
    return {name: sum(o.grads[name] for o in out) if (mode == "p3" and name == "W1") else out[0].grads[name]
            for name in out[0].grads}


@pytest.mark.parametrize("world_size, feature_width, batch_size", [(2, 16, 64), (2, 300, 64), (3, 50, 32)])
@pytest.mark.parametrize("mode", ["p3", "data_parallel"])
def test_step_equals_one_process_and_its_bytes_are_measured(mode, world_size, feature_width, batch_size):
    args = {"mode": mode, "feature_width": feature_width, "batch_size": batch_size}
    out = run("gnnbook.ch5_minibatch.p3:step", world_size, args, deadline_s=180)
    ref = reference_gradients(build(feature_width=feature_width, batch_size=batch_size, num_machines=world_size))
    got = _gradients(out, mode)
    for name in ref:
        assert torch.allclose(got[name], ref[name], atol=1e-5), (mode, name, float((got[name] - ref[name]).abs().max()))
    for o in out:
        ops = o.summary["by_op"]
        expected = sum(ops[op]["expected_sent"] for op in PHASE_OPS[mode])
        assert o.phase_wire[0] == expected, (mode, o.rank)            # measured = payload + gloo headers
        assert o.gradient_wire[0] == ops["all_reduce"]["expected_sent"]
    payload = sum(o.summary["by_op"][op]["payload_sent"] for o in out for op in PHASE_OPS[mode])
    formula = sum(o.activation_bytes_formula + o.feature_bytes_formula for o in out)
    counts = world_size * (world_size - 1) * 8 if mode == "data_parallel" else 0   # the row counts exchanged first
    assert payload == formula + counts


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="feature_width >= 4"):
        build(feature_width=3, num_machines=4)
    with pytest.raises(ValueError, match="too few for 4 minibatches of 64"):
        build(num_machines=4, batch_size=64)
