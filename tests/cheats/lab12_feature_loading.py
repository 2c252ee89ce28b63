"""Lab 12's cheats: the staging gather handed to the package's gather_into, the line count to its
pcie_lines (also read back from the cost model's zero-copy time)."""
from grading_cheats import Cheat

LOADING = "gnnbook.ch5_minibatch.feature_loading"

CHEATS = [
    # task 1: my_gather_into(features, ids, staging)
    Cheat("package gather_into", "direct", 1,
          {0: f"from {LOADING} import gather_into\nreturn gather_into(features, ids, staging)"}),
    Cheat("gather_into bound at import", "early-bound", 1, {0: "return PACKAGE_GATHER(features, ids, staging)"},
          {0: f"from {LOADING} import gather_into as PACKAGE_GATHER"}),
    Cheat("gather_into through importlib", "importlib", 1,
          {0: f"import importlib\nreturn importlib.import_module({LOADING!r}).gather_into(features, ids, staging)"}),
    # task 2: my_pcie_lines(ids, width, itemsize)
    Cheat("package pcie_lines", "direct", 2,
          {0: f"from {LOADING} import pcie_lines\nreturn pcie_lines(ids, width, itemsize)"}),
    Cheat("pcie_lines bound at import", "early-bound", 2, {0: "return PACKAGE_LINES(ids, width, itemsize)"},
          {0: f"from {LOADING} import pcie_lines as PACKAGE_LINES"}),
    Cheat("pcie_lines through importlib", "importlib", 2,
          {0: f"import importlib\nreturn importlib.import_module({LOADING!r}).pcie_lines(ids, width, itemsize)"}),
    Cheat("lines read back from LoadingModel's zero-copy time", "direct", 2,
          {0: f"from {LOADING} import LINE_BYTES, LoadingModel\n"
              "model = LoadingModel(host={'pageable': (0.0, 0.0, 0.0), 'pinned': (0.0, 0.0, 0.0)},\n"
              "                     pcie_bytes_per_s=float(LINE_BYTES), dma_latency_s=0.0, launch_s=0.0, itemsize=itemsize)\n"
              "return round(model.predict(len(ids), width, ids)['zero-copy'] - 8 * len(ids) / LINE_BYTES)"}),
]
