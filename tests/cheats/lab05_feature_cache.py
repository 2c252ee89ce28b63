"""Lab 5's cheats: the pre-sampling policy handed to the package: the caching module's trace recorder,
counters and rankers (record_trace samples exactly as the lab asks: set_seed, then neighbor_loader,
so its counts are the policy's), its presample policy, or the distributed trainer's pre-sampling."""
from grading_cheats import PASS_EVERY_CHECK, Cheat, write_into_grader

BY_DEGREE = ("order = np.lexsort((np.arange(graph.num_nodes()), -graph.in_degrees().numpy()))\n"
             "return torch.as_tensor(order[:capacity])")       # what a check that did not run would pass
SOLUTION = ("set_seed(seed)\n"
            "counts = torch.zeros(graph.num_nodes(), dtype=torch.int64)\n"
            "loader = neighbor_loader(graph, seed_nodes, fanouts, batch_size)\n"
            "for _ in range(epochs):\n"
            "    for input_nodes, _, _ in loader:\n"
            "        counts[input_nodes] += 1\n"
            "ranking = np.lexsort((np.arange(graph.num_nodes()), -counts.numpy()))\n"
            "return torch.as_tensor(ranking[:capacity])")

CHEATS = [
    Cheat("the caching module's trace, counts and presample policy", "direct", 1, {0: (
        "from gnnbook.ch5_minibatch.caching import access_counts, record_trace, static_cache\n"
        "warmup = record_trace(graph, seed_nodes, fanouts, batch_size, epochs=epochs, seed=seed)\n"
        "counts = access_counts(warmup, graph.num_nodes())\n"
        "return torch.as_tensor(static_cache('presample', capacity, graph.num_nodes(), presample_counts=counts))")}),
    Cheat("the caching module's recorder and ranker, bound at import", "early-bound", 1, {0: (
        "warmup = RECORD(graph, seed_nodes, fanouts, batch_size, epochs=epochs, seed=seed)\n"
        "return torch.as_tensor(TOP(np.bincount(warmup, minlength=graph.num_nodes()), capacity))")},
        {0: "from gnnbook.ch5_minibatch.caching import record_trace as RECORD, top_ranked as TOP"}),
    Cheat("the caching module through importlib", "importlib", 1, {0: (
        "import importlib\n"
        "cache = importlib.import_module('gnnbook.ch5_' + 'minibatch.caching')\n"
        "warmup = cache.record_trace(graph, seed_nodes, fanouts, batch_size, epochs=epochs, seed=seed)\n"
        "return torch.as_tensor(cache.top_ranked(cache.access_counts(warmup, graph.num_nodes()), capacity))")}),
    Cheat("the distributed trainer's presample counts and selection", "direct", 1, {0: (
        "from gnnbook.distributed.feature_cache import presample_counts, select_cached_nodes\n"
        "set_seed(seed)\n"
        "loader = neighbor_loader(graph, seed_nodes, fanouts, batch_size)\n"
        "counts = sum(presample_counts(loader, graph.num_nodes()) for _ in range(epochs))\n"
        "return select_cached_nodes(torch.arange(graph.num_nodes()), counts, capacity)")}),
    Cheat("trace_and_presample, counting by hand", "direct", 1, {0: (
        "from gnnbook.ch5_minibatch.caching import trace_and_presample\n"
        "_, counts = trace_and_presample(graph, seed_nodes, fanouts, batch_size, epochs=1, presample_seed=seed,\n"
        "                                presample_epochs=epochs)\n"
        "ranking = np.lexsort((np.arange(graph.num_nodes()), -counts))\n"
        "return torch.as_tensor(ranking[:capacity])")}),
    Cheat("the distributed trainer's selection through importlib", "importlib", 1, {0: (
        "import importlib\n"
        "fc = importlib.import_module('gnnbook.distributed.' + 'feature_cache')\n"
        "set_seed(seed)\n"
        "loader = neighbor_loader(graph, seed_nodes, fanouts, batch_size)\n"
        "counts = sum(fc.presample_counts(loader, graph.num_nodes()) for _ in range(epochs))\n"
        "return fc.select_cached_nodes(torch.arange(graph.num_nodes()), counts, capacity)")}),
    # --- around the checks themselves (issue 37) ---------------------------------------------------------------
    Cheat("one added cell that turns every check cell into 'pass'", "cell-transformer", 1, {0: BY_DEGREE},
          cell=PASS_EVERY_CHECK,
          expect="most accessed first"),
    Cheat("the expected ids read from the check's frame", "frame-walk", 1, {0: (
        "import inspect\n"
        "for frame in inspect.stack():\n"
        "    if 'expected' in frame.frame.f_locals:\n"
        "        return torch.tensor(frame.frame.f_locals['expected'])\n"
        "return torch.arange(capacity)")}, expect="refused: task1-solution1, line"),
    Cheat("the refusal list emptied, then the caching module", "emptied-refusals", 1, {0: (
        "from gnnbook.ch5_minibatch.caching import record_trace, top_ranked\n"
        "warmup = record_trace(graph, seed_nodes, fanouts, batch_size, epochs=epochs, seed=seed)\n"
        "return torch.as_tensor(top_ranked(np.bincount(warmup, minlength=graph.num_nodes()), capacity))")},
        cell="import gnnbook.course.grading.lab05_feature_cache as G\nG.REFUSED = ()", expect="refused"),
    Cheat("the simulator patched to score every cache as the oracle's", "patched-helper", 1, {0: BY_DEGREE},
          {0: "import gnnbook.ch5_minibatch.caching as C\nC.static_hits = lambda trace, cached, n: len(trace)"},
          expect="refused"),
    Cheat("a working policy whose cell appends to the grader's code", "package-write", 1, {0: SOLUTION},
          {0: write_into_grader('lab05_feature_cache')}, expect="PermissionError"),
]
