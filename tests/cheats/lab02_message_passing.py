"""Lab 2's cheats: the GCN layer (task 1) or the two-layer model (task 2) handed to DGL's GraphConv or
EdgeWeightNorm, PyG's GCNConv, the package's programming-model layer, its normalised adjacencies or its
GCN normalisation.

Each would pass the checks if nothing were refused: the package's layer and DGL's GraphConv compute
exactly the layer asked for (out-degree of the sender, in-degree of the receiver, on the directed
graphs too), and the task-2 cheats keep two MyGraphConv layers for their weights (the checks count
them and read them) while the forward pass runs on the reference.
"""
from grading_cheats import PASS_EVERY_CHECK, Cheat, TRY_EVERY_CELL, write_into_grader

IGNORES_THE_GRAPH = "return h @ self.weight + self.bias"      # what the checks would have passed, had they run
SOLUTION = ("with g.local_scope():\n"
            "    norm_src = g.out_degrees().float().clamp(min=1).rsqrt()\n"
            "    norm_dst = g.in_degrees().float().clamp(min=1).rsqrt()\n"
            "    g.ndata['h'] = (h @ self.weight) * norm_src[:, None]\n"
            "    g.update_all(fn.copy_u('h', 'm'), fn.sum('m', 'h'))\n"
            "    return g.ndata['h'] * norm_dst[:, None] + self.bias")

PACKAGE_LAYER = "SimpleNamespace(weight=self.weight, bias=self.bias)"

CHEATS = [
    # --- task 1: MyGraphConv.forward ---------------------------------------------------------------
    Cheat("the package's graph-centric GCN layer", "direct", 1, {0: (
        "from types import SimpleNamespace\n"
        "from gnnbook.ch7_systems.progmodels import graph_centric\n"
        f"return graph_centric('gcn', g, h, {PACKAGE_LAYER})")}),
    Cheat("DGL's GraphConv, bound at import", "early-bound", 1, {0: (
        "import dgl.nn as dglnn\n"
        "conv = dglnn.GraphConv(self.weight.shape[0], self.weight.shape[1], norm='both', weight=False, bias=False)\n"
        "return GRAPHCONV_FORWARD(conv, g, h @ self.weight) + self.bias")},
        {0: "import dgl.nn as _dglnn\nGRAPHCONV_FORWARD = _dglnn.GraphConv.forward"}),
    Cheat("the package's layer through importlib", "importlib", 1, {0: (
        "import importlib\n"
        "from types import SimpleNamespace\n"
        "layer = importlib.import_module('gnnbook.ch7_' + 'systems.progmodels').graph_centric\n"
        f"return layer('gcn', g, h, {PACKAGE_LAYER})")}),
    Cheat("DGL's GraphConv", "direct", 1, {0: (
        "import dgl.nn as dglnn\n"
        "conv = dglnn.GraphConv(self.weight.shape[0], self.weight.shape[1], norm='both', weight=False, bias=False)\n"
        "return conv(g, h @ self.weight) + self.bias")}),
    Cheat("DGL's EdgeWeightNorm", "direct", 1, {0: (
        "import dgl.nn as dglnn\n"
        "with g.local_scope():\n"
        "    g.edata['w'] = dglnn.EdgeWeightNorm(norm='both')(g, torch.ones(g.num_edges()))\n"
        "    g.ndata['h'] = h @ self.weight\n"
        "    g.update_all(fn.u_mul_e('h', 'w', 'm'), fn.sum('m', 'h'))\n"
        "    return g.ndata['h'] + self.bias")}),
    Cheat("the package's normalised adjacency (spmm)", "direct", 1, {0: (
        "from gnnbook.ch6_fullgraph.spmm import normalised_adjacency\n"
        "index, value = normalised_adjacency(g, torch.arange(g.num_nodes()))\n"
        "adj = torch.sparse_coo_tensor(index, value, (g.num_nodes(), g.num_nodes()))\n"
        "return torch.sparse.mm(adj, h @ self.weight) + self.bias")}),
    Cheat("the package's one-part local graph", "direct", 1, {0: (
        "from gnnbook.ch6_fullgraph.subgraph import local_graph\n"
        "part = local_graph(g, torch.zeros(g.num_nodes(), dtype=torch.int64), 0, 'gcn')\n"
        "return torch.sparse.mm(part.adjacency, h @ self.weight) + self.bias")}),
    Cheat("the package's normalised adjacency, bound at import", "early-bound", 1, {0: (
        "index, value = NORMALISED(g, torch.arange(g.num_nodes()))\n"
        "adj = torch.sparse_coo_tensor(index, value, (g.num_nodes(), g.num_nodes()))\n"
        "return torch.sparse.mm(adj, h @ self.weight) + self.bias")},
        {0: "from gnnbook.ch6_fullgraph.spmm import normalised_adjacency as NORMALISED"}),
    Cheat("the package's GCN edge weights", "direct", 1, {0: (
        "from gnnbook.graph.normalisation import gcn_edge_weights\n"
        "src, dst = g.edges()\n"
        "value = gcn_edge_weights(src, dst, g.out_degrees(), g.in_degrees())\n"
        "adj = torch.sparse_coo_tensor(torch.stack([dst, src]), value, (g.num_nodes(), g.num_nodes()))\n"
        "return torch.sparse.mm(adj, h @ self.weight) + self.bias")}),
    Cheat("DGL's GraphConv through importlib", "importlib", 1, {0: (
        "import importlib\n"
        "graphconv = importlib.import_module('dgl.nn.pytorch.conv.' + 'graphconv').GraphConv\n"
        "conv = graphconv(self.weight.shape[0], self.weight.shape[1], norm='both', weight=False, bias=False)\n"
        "return conv(g, h @ self.weight) + self.bias")}),
    Cheat("PyG's gcn_norm", "direct", 1, {0: (
        "from torch_geometric.nn.conv.gcn_conv import gcn_norm\n"
        "src, dst = g.edges()\n"
        "index, weight = gcn_norm(torch.stack([src, dst]), num_nodes=g.num_nodes(), add_self_loops=False)\n"
        "adj = torch.sparse_coo_tensor(torch.stack([index[1], index[0]]), weight, (g.num_nodes(), g.num_nodes()))\n"
        "return torch.sparse.mm(adj, h @ self.weight) + self.bias")}),
    # --- task 2: MyGCN, its two MyGraphConv layers kept for their weights ------------------------
    Cheat("DGL's GraphConv on MyGraphConv's weights", "direct", 2, {
        0: ("self.conv1 = MyGraphConv(in_feats, hidden)\n"
            "self.conv2 = MyGraphConv(hidden, num_classes)\n"
            "self.dropout = nn.Dropout(dropout)\n"
            "import dgl.nn as dglnn\n"
            "self.ref = dglnn.GraphConv(in_feats, hidden, norm='both', weight=False, bias=False)"),
        1: ("h = F.relu(self.ref(g, self.dropout(h), weight=self.conv1.weight) + self.conv1.bias)\n"
            "return self.ref(g, self.dropout(h), weight=self.conv2.weight) + self.conv2.bias")}),
    Cheat("GraphConv.forward bound at import, on MyGraphConv's weights", "early-bound", 2, {
        0: ("self.conv1 = MyGraphConv(in_feats, hidden)\n"
            "self.conv2 = MyGraphConv(hidden, num_classes)\n"
            "self.dropout = nn.Dropout(dropout)\n"
            "import dgl.nn as dglnn\n"
            "self.ref = dglnn.GraphConv(in_feats, hidden, norm='both', weight=False, bias=False)"),
        1: ("h = F.relu(GRAPHCONV_FORWARD(self.ref, g, self.dropout(h), weight=self.conv1.weight) + self.conv1.bias)\n"
            "return GRAPHCONV_FORWARD(self.ref, g, self.dropout(h), weight=self.conv2.weight) + self.conv2.bias")},
        {0: "import dgl.nn as _dglnn\nGRAPHCONV_FORWARD = _dglnn.GraphConv.forward"}),
    Cheat("the package's layer through importlib, on MyGraphConv's weights", "importlib", 2, {
        0: ("self.conv1 = MyGraphConv(in_feats, hidden)\n"
            "self.conv2 = MyGraphConv(hidden, num_classes)\n"
            "self.dropout = nn.Dropout(dropout)"),
        1: ("import importlib\n"
            "layer = importlib.import_module('gnnbook.ch7_' + 'systems.progmodels').graph_centric\n"
            "h = F.relu(layer('gcn', g, self.dropout(h), self.conv1))\n"
            "return layer('gcn', g, self.dropout(h), self.conv2)")}),
    # --- around the checks themselves (issue 37): each scored full marks when checks ran in the student's kernel ---
    Cheat("one added cell that turns every check cell into 'pass'", "cell-transformer", 1, {0: IGNORES_THE_GRAPH},
          cell=PASS_EVERY_CHECK,
          expect="max |difference|"),
    Cheat("every cell wrapped in try/except BaseException", "try-wrapper", 1, {0: IGNORES_THE_GRAPH},
          cell=TRY_EVERY_CELL,
          expect="max |difference|"),
    Cheat("the expected output read from the check's frame", "frame-walk", 1, {0: (
        "import sys\n"
        "frame = sys._getframe(1)\n"
        "while frame is not None and 'expected' not in frame.f_locals:\n"
        "    frame = frame.f_back\n"
        "return frame.f_locals['expected'][-1]")}, expect="refused: task1-solution1, line"),
    Cheat("a copy of GraphConv.forward's code object, made at import", "code-copy", 1, {0: (
        "return COPIED(REF, g, h @ self.weight) + self.bias")},
        {0: ("import types\nimport dgl.nn as _d\n"
             "COPIED = types.FunctionType(_d.GraphConv.forward.__code__, _d.GraphConv.forward.__globals__)\n"
             "REF = _d.GraphConv(1, 1, norm='both', weight=False, bias=False)")}, expect="refused"),
    Cheat("the refusal lists emptied, then the package's layer", "emptied-refusals", 1, {0: (
        "from types import SimpleNamespace\n"
        "from gnnbook.ch7_systems.progmodels import graph_centric\n"
        "return graph_centric('gcn', g, h, SimpleNamespace(weight=self.weight, bias=self.bias))")},
        cell=("from gnnbook.course import labcheck\n"
              "for lab in labcheck.LAB_REFERENCES:\n"
              "    labcheck.LAB_REFERENCES[lab] = ()"), expect="refused"),
    Cheat("the package's source executed again into fresh functions", "re-exec-source", 1, {0: (
        "import inspect\n"
        "from types import SimpleNamespace\n"
        "import gnnbook.ch7_systems.progmodels as progmodels\n"
        "fresh = {}\n"
        "exec(compile(inspect.getsource(progmodels), 'progmodels', 'exec'), fresh)\n"
        "return fresh['graph_centric']('gcn', g, h, SimpleNamespace(weight=self.weight, bias=self.bias))")},
        expect="refused"),
    Cheat("torch.allclose patched to say yes, a model without ReLU", "patched-helper", 2, {
        0: ("self.conv1 = MyGraphConv(in_feats, hidden)\n"
            "self.conv2 = MyGraphConv(hidden, num_classes)"),
        1: "return self.conv2(g, self.conv1(g, h))"},
        {0: "torch.allclose = lambda *args, **kwargs: True"}, expect="refused: task2-solution1, line"),
    Cheat("a working layer whose cell appends to the grader's code", "package-write", 1, {0: SOLUTION},
          {0: write_into_grader('lab02_message_passing')}, expect="PermissionError"),
    Cheat("a layer that never returns", "hang", 1, {0: "while True:\n    pass"}, expect="deadline"),
]
