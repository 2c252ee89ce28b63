"""Lab 4's cheats: the minibatch step (task 1) handed to the package's minibatch_step, or, in task 2, the
student's step replaced by the package's for the checks' training runs.

Each would pass the checks if nothing were refused: the package's step is exactly the step asked for
(SAGE takes dense features, as the lab's step gathers them), so it gives the seeds the whole graph's
loss, one clean SGD update, full-graph accuracy, and the teacher's choice's peak and accuracy.
"""
from grading_cheats import Cheat

_ARGS = "model, optimizer, feat, labels, input_nodes, output_nodes, blocks"
_CHOICE = "return 8, [5, 5]"

CHEATS = [
    # --- task 1: my_minibatch_step ------------------------------------------------------------------
    Cheat("the package's minibatch_step", "direct", 1, {0: (
        "from gnnbook.training.minibatch import minibatch_step\n"
        f"return minibatch_step({_ARGS})")}),
    Cheat("the package's minibatch_step, bound at import", "early-bound", 1, {0: f"return PACKAGE_STEP({_ARGS})"},
          {0: "from gnnbook.training.minibatch import minibatch_step as PACKAGE_STEP"}),
    Cheat("the package's minibatch_step through importlib", "importlib", 1, {0: (
        "import importlib\n"
        f"return importlib.import_module('gnnbook.training.' + 'minibatch').minibatch_step({_ARGS})")}),
    # --- task 2: the teacher's choice, trained with the package's step instead of the student's -----------
    Cheat("the teacher's choice, your step rebound to minibatch_step", "direct", 2, {0: (
        "global my_minibatch_step\n"
        "from gnnbook.training.minibatch import minibatch_step as my_minibatch_step\n"
        f"{_CHOICE}")}),
    Cheat("the teacher's choice, your step bound to minibatch_step at import", "early-bound", 2, {0: _CHOICE},
          {0: "from gnnbook.training.minibatch import minibatch_step as my_minibatch_step"}),
    Cheat("the teacher's choice, your step fetched through importlib", "importlib", 2, {0: (
        "import importlib\n"
        "global my_minibatch_step\n"
        "my_minibatch_step = importlib.import_module('gnnbook.training.' + 'minibatch').minibatch_step\n"
        f"{_CHOICE}")}),
    # --- around the check itself (issue 37): with exact memory "unavailable", the budget once passed unmeasured; now
    # the added cell never runs, and the budget is measured in the sandbox --------------------------------------------
    Cheat("a choice far over the budget, the memory counter reported unavailable", "patched-helper", 2,
          {0: "return 256, [25, 25]"},
          cell="import gnnbook.base.memory as M\nM.exact_memory_available = lambda *args, **kwargs: False",
          expect="use a smaller batch or smaller fanouts"),
]
