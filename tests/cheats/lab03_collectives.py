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
]
