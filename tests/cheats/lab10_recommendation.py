"""Lab 10's cheats: the BPR loss handed to the package's or PyG's, one LightGCN step to PyG's LGConv,
to its normalisation (gcn_norm, get_laplacian, the package's gcn_edge_weights) or to DGL's GraphConv."""
from grading_cheats import Cheat, TRY_EVERY_CELL

RECSYS = "gnnbook.applications.recsys"
SAME_SHAPE = ("if positive.shape != negative.shape:\n"
              "    raise ValueError('positive and negative scores differ in shape')\n")

CHEATS = [
    # task 2: my_propagate(edge_index, h)
    Cheat("PyG's LGConv", "direct", 2, {0: "from torch_geometric.nn import LGConv\nreturn LGConv()(h, edge_index)"}),
    Cheat("LGConv's forward bound at import", "early-bound", 2, {0: "return PYG_STEP(h, edge_index)"},
          {0: "from torch_geometric.nn import LGConv as _LGConv\nPYG_STEP = _LGConv().forward"}),
    Cheat("LGConv through importlib", "importlib", 2,
          {0: "import importlib\n"
              "return importlib.import_module('torch_geometric.nn.conv.lg_conv').LGConv()(h, edge_index)"}),
    Cheat("PyG's gcn_norm weights", "direct", 2,
          {0: "from torch_geometric.nn.conv.gcn_conv import gcn_norm\n"
              "ei, w = gcn_norm(edge_index, num_nodes=h.shape[0], add_self_loops=False)\n"
              "return torch.zeros_like(h).index_add_(0, ei[1], h[ei[0]] * w.unsqueeze(1))"}),
    Cheat("PyG's symmetric Laplacian, h - L h", "direct", 2,
          {0: "from torch_geometric.utils import get_laplacian\n"
              "ei, w = get_laplacian(edge_index, normalization='sym', num_nodes=h.shape[0])\n"
              "return h - torch.zeros_like(h).index_add_(0, ei[1], h[ei[0]] * w.unsqueeze(1))"}),
    Cheat("DGL's GraphConv, norm='both'", "direct", 2,
          {0: "import dgl\nimport dgl.nn as dglnn\n"
              "g = dgl.graph((edge_index[0], edge_index[1]), num_nodes=h.shape[0])\n"
              "conv = dglnn.GraphConv(h.shape[1], h.shape[1], norm='both', weight=False, bias=False,\n"
              "                       allow_zero_in_degree=True)\n"
              "return conv(g, h)"}),
    Cheat("the package's GCN edge weights", "direct", 2,
          {0: "from gnnbook.graph.normalisation import gcn_edge_weights\n"
              "deg = torch.bincount(edge_index[0], minlength=h.shape[0])\n"
              "w = gcn_edge_weights(edge_index[0], edge_index[1], deg, deg)\n"
              "return torch.zeros_like(h).index_add_(0, edge_index[1], h[edge_index[0]] * w.unsqueeze(1))"}),
    # task 1: my_bpr_loss(positive, negative)
    Cheat("package bpr_loss", "direct", 1, {0: f"from {RECSYS} import bpr_loss\nreturn bpr_loss(positive, negative)"}),
    Cheat("bpr_loss bound at import", "early-bound", 1, {0: "return PACKAGE_BPR(positive, negative)"},
          {0: f"from {RECSYS} import bpr_loss as PACKAGE_BPR"}),
    Cheat("bpr_loss through importlib", "importlib", 1,
          {0: f"import importlib\nreturn importlib.import_module({RECSYS!r}).bpr_loss(positive, negative)"}),
    Cheat("PyG's BPRLoss", "direct", 1,
          {0: SAME_SHAPE + "from torch_geometric.nn.models.lightgcn import BPRLoss\n"
                           "return BPRLoss()(positive, negative)"}),
    Cheat("PyG's BPRLoss through importlib", "importlib", 1,
          {0: SAME_SHAPE + "import importlib\n"
                           "return importlib.import_module('torch_geometric.nn.models.lightgcn')"
                           ".BPRLoss()(positive, negative)"}),
    # --- around the checks themselves (issue 37) ---------------------------------------------------------------
    Cheat("every cell wrapped in try/except BaseException", "try-wrapper", 1,
          {0: "return (positive - negative).mean()"},
          cell=TRY_EVERY_CELL,
          expect="loss"),
    Cheat("the check's expected loss read from its frame", "frame-walk", 1, {0: (
        "import inspect\n"
        "return inspect.currentframe().f_back.f_locals['want']")}, expect="refused: task1-solution1"),
    Cheat("LGConv's code object copied into a function of its own", "code-copy", 2, {0: (
        "import types\n"
        "from torch_geometric.nn import conv\n"
        "step = types.FunctionType(conv.LGConv.forward.__code__, conv.LGConv.forward.__globals__)\n"
        "return step(conv.LGConv(), h, edge_index)")}, expect="refused: task2-solution1"),
    Cheat("the package's source executed again", "re-exec-source", 2, {0: (
        "fresh = {}\n"
        "exec(open('/work/main/gnnbook/applications/recsys.py').read(), fresh)\n"
        "return fresh['lightgcn_propagate'](edge_index, h)")}, expect="refused: task2-solution1"),
]
