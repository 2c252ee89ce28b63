"""Lab 4's checks (gnnbook.course.grading.lab04_minibatch): the student's process never sees a test label, and
the step check fails a step that forgets to clear stale gradients."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gnnbook.course.grading import lab04_minibatch as lab04
from gnnbook.course.grading.student import Here


def step(model, optimizer, feat, labels, input_nodes, output_nodes, blocks, clear=True):
    model.train()
    loss = F.cross_entropy(model(blocks, feat[input_nodes]), labels[output_nodes])
    if clear:
        optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return float(loss)


def test_the_students_process_never_sees_a_test_label():
    graph, seen = lab04.cora_graph(), {}

    def spy(model, optimizer, feat, labels, input_nodes, output_nodes, blocks):
        seen.update(labels=labels.clone(), block_labels=blocks[0].srcdata["label"].clone(), inputs=input_nodes.clone())
        return step(model, optimizer, feat, labels, input_nodes, output_nodes, blocks)

    Here({"my_minibatch_step": spy}).run([("lab04.step", {
        "graph": lab04.hide_test_labels(graph), "batch_size": 64, "fanouts": [-1, -1], "model": "sage", "seed": 0,
        "lr": 0.5, "options": {}})])
    test = graph.ndata["test_mask"]
    assert bool(graph.ndata["label"][test].ne(0).any()), "Cora's test nodes have labels other than 0"
    assert bool((seen["labels"][test] == 0).all()), "the step's labels hold the test labels"
    in_block = test[seen["inputs"]]
    assert bool(in_block.any()) and bool((seen["block_labels"][in_block] == 0).all()), "the blocks carry test labels"


def test_a_step_that_keeps_stale_gradients_fails():
    assert lab04.check_step(Here({"my_minibatch_step": step}))["cases"] == 2
    stale = Here({"my_minibatch_step": lambda *args: step(*args, clear=False)})
    with pytest.raises(AssertionError, match="moved wrongly: zero the gradients"):
        lab04.check_step(stale)
    wrong_type = Here({"my_minibatch_step": lambda *args: torch.tensor(step(*args))})
    with pytest.raises(AssertionError, match="return the loss as a float"):
        lab04.check_step(wrong_type)
