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
]
