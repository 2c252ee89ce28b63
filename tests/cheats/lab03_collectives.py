"""Lab 3's cheats: the ring handed to the package's all-reduces or to torch's collectives."""
from grading_cheats import Cheat

CHEATS = [
    Cheat("package ring", "direct", 1, {0: "from gnnbook.comm.algorithms import ring_all_reduce as ring\n"
                                           "ring(tensor, comm)"}),
    Cheat("package ring, bound at import", "early-bound", 1, {0: "PACKAGE_RING(tensor, comm)"},
          {0: "from gnnbook.comm.algorithms import ring_all_reduce as PACKAGE_RING"}),
    Cheat("package tree through importlib", "importlib", 1,
          {0: "import importlib\n"
              "importlib.import_module('gnn' + 'book.comm.algorithms').tree_all_reduce(tensor, comm)"}),
    Cheat("torch's all_reduce", "direct", 1, {0: "import torch.distributed as dist\ndist.all_reduce(tensor)"}),
    Cheat("the process group's allreduce", "direct", 1,
          {0: "import torch.distributed as dist\n"
              "dist.distributed_c10d._get_default_group().allreduce([tensor]).wait()"}),
    # --- around the checks themselves (issue 37) ---------------------------------------------------------------
    Cheat("the comm's byte counters zeroed after a gloo all-reduce", "patched-helper", 1, {0: (
        "import torch.distributed as dist\n"
        "dist.all_reduce(tensor)\n"
        "comm.sent = comm.received = 0")}, expect="refused: task1-solution1"),
    Cheat("the expected sum read from the check's frame", "frame-walk", 1, {0: (
        "import inspect\n"
        "for frame in inspect.stack():\n"
        "    if 'expected' in frame.frame.f_locals:\n"
        "        tensor.copy_(frame.frame.f_locals['expected'])")}, expect="refused: task1-solution1"),
    Cheat("a ring that never finishes", "hang", 1, {0: "while True:\n    pass"}, expect="deadline"),
]
