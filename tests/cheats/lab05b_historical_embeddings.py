"""Lab 5b's cheats: the history table handed to the package's ``History``, the batch forward to its
``gcn_forward`` (task 3 has no code of its own: the release and the typed answers cover it)."""
from grading_cheats import Cheat

MODULE = "gnnbook.ch5_minibatch.history"

CHEATS = [
    # task 1: MyHistory's three regions (__init__, push, pull)
    Cheat("package History", "direct", 1, {
        0: f"from {MODULE} import History\nself.package = History(num_nodes, hidden, num_tables)\n"
           "self.tables = self.package.tables",
        1: "self.package.push(layer, nodes, h)",
        2: "return self.package.pull(layer, nodes)"}),
    Cheat("History.push / pull bound at import", "early-bound", 1, {
        0: "self.tables = [torch.zeros(num_nodes, hidden) for _ in range(num_tables)]\nself.pushed = self.pulled = 0",
        1: "PACKAGE_PUSH(self, layer, nodes, h)",
        2: "return PACKAGE_PULL(self, layer, nodes)"},
        {0: f"from {MODULE} import History as _History\nPACKAGE_PUSH, PACKAGE_PULL = _History.push, _History.pull"}),
    Cheat("package History through importlib", "importlib", 1, {
        0: "import importlib\n"
           f"self.package = importlib.import_module({MODULE!r}).History(num_nodes, hidden, num_tables)\n"
           "self.tables = self.package.tables",
        1: "self.package.push(layer, nodes, h)",
        2: "return self.package.pull(layer, nodes)"}),
    # task 2: my_gas_forward
    Cheat("package gcn_forward", "direct", 2, {0: f"from {MODULE} import gcn_forward\n"
                                                   "return gcn_forward(model, batch, x, history)"}),
    Cheat("gcn_forward bound at import", "early-bound", 2, {0: "return PACKAGE_FORWARD(model, batch, x, history)"},
          {0: f"from {MODULE} import gcn_forward as PACKAGE_FORWARD"}),
    Cheat("gcn_forward through importlib", "importlib", 2,
          {0: "import importlib\n"
              f"return importlib.import_module({MODULE!r}).gcn_forward(model, batch, x, history)"}),
    Cheat("gcn_forward under another name", "direct", 2,
          {0: "import gnnbook.ch5_minibatch.history as gas\nforward = gas.gcn_forward\n"
              "return forward(model, batch, x, history)"}),
]
