"""Lab 6's cheats: the exchange handed to the package's HaloExchange; the bytes handed to its formula; the halo rows
read around the exchange (a rank's inputs left on disk: tests/test_lab06.py)."""
from grading_cheats import Cheat

CHEATS = [
    Cheat("package HaloExchange", "direct", 1,
          {0: "from gnnbook.ch6_fullgraph.subgraph import HaloExchange\n"
              "return HaloExchange.apply(h, part, comm, [0.0])"}),
    Cheat("package HaloExchange, bound at import", "early-bound", 1,
          {0: "return PACKAGE_EXCHANGE(h, part, comm, [0.0])"},
          {0: "from gnnbook.ch6_fullgraph.subgraph import HaloExchange\nPACKAGE_EXCHANGE = HaloExchange.apply"}),
    Cheat("package HaloExchange through importlib", "importlib", 1,
          {0: "import importlib\n"
              "module = importlib.import_module('gnnbook.ch6_fullgraph.' + 'subgraph')\n"
              "return module.HaloExchange.apply(h, part, comm, [0.0])"}),
    Cheat("package byte model", "direct", 2,
          {0: "from gnnbook.comm import gloo_bytes\n"
              "forward = gloo_bytes.all_to_all(rows_sent * hidden * 4, rows_received * hidden * 4, world_size)\n"
              "backward = gloo_bytes.all_to_all(rows_received * hidden * 4, rows_sent * hidden * 4, world_size)\n"
              "return (forward + backward).wire_sent"}),
    Cheat("package byte model, bound at import", "early-bound", 2,
          {0: "return (MODEL(rows_sent * hidden * 4, rows_received * hidden * 4, world_size)\n"
              "        + MODEL(rows_received * hidden * 4, rows_sent * hidden * 4, world_size)).wire_sent"},
          {0: "from gnnbook.comm.gloo_bytes import all_to_all as MODEL"}),
    Cheat("package byte model through importlib", "importlib", 2,
          {0: "import importlib\n"
              "g = importlib.import_module('gnnbook.comm.' + 'gloo_bytes')\n"
              "v = g.Volume(sent=(rows_sent + rows_received) * hidden * 4, messages_sent=2 * (world_size - 1),\n"
              "             messages_received=2 * (world_size - 1))\n"
              "return v.wire_sent"}),
    # --- around the checks themselves (issue 37) ---------------------------------------------------------------
    Cheat("the halo rows read from the rank's frames", "frame-walk", 1, {0: (
        "import inspect\n"
        "data = inspect.currentframe().f_back.f_locals['data']\n"
        "return (data['x'] @ data['weight'])[:len(part.halo)]")}, expect="refused: task1-solution1"),
]
