"""Lab 8's cheats: the edge cut handed to the package's partition metrics."""
from grading_cheats import Cheat

_GRAPH = "import dgl\nreal = src != dst\ng = dgl.graph((src[real], dst[real]), num_nodes=len(owner))\n"

CHEATS = [
    Cheat("package partition_metrics", "direct", 1,
          {0: _GRAPH + "from gnnbook.ch6_fullgraph.partitioners import partition_metrics\n"
                       "return partition_metrics(g, owner)['edge_cut']"}),
    Cheat("package partition_metrics, bound at import", "early-bound", 1,
          {0: _GRAPH + "return METRICS(g, owner)['edge_cut']"},
          {0: "from gnnbook.ch6_fullgraph.partitioners import partition_metrics as METRICS"}),
    Cheat("package partition_metrics through importlib", "importlib", 1,
          {0: _GRAPH + "import importlib\n"
                       "return importlib.import_module('gnnbook.ch6_fullgraph.' + 'partitioners')"
                       ".partition_metrics(g, owner)['edge_cut']"}),
    # --- around the checks themselves (issue 37): the job's numbers made up in the student's kernel once scored ---
    Cheat("a setup far over the budget, the remote rows read from the check's frame", "frame-walk", 2, {0: (
        "import inspect\n"
        "inspect.currentframe().f_back.f_locals['budget'] = 10 ** 9\n"
        "return 'random', [25, 25]")}, expect="refused: task2-solution1"),
    Cheat("a made-up job from a fake LocalCluster", "fake-cluster", 2, {0: "return 'random', [25, 25]"},
          {0: ("import gnnbook.distributed as D\n"
               "class Fake:\n"
               "    def __init__(self, *args, **kwargs):\n"
               "        pass\n"
               "    def __enter__(self):\n"
               "        return self\n"
               "    def __exit__(self, *args):\n"
               "        return False\n"
               "    def train(self, config):\n"
               "        return {'test_acc': 0.99, 'epochs_run': 1, "
               "'feature_rows': {'remote': [0], 'remote_fraction': 0.0}}\n"
               "D.LocalCluster = Fake")}, expect="refused: task2-solution1"),
]
