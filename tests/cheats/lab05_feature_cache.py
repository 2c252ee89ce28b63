"""Lab 5's cheats: the pre-sampling policy handed to the package: the caching module's trace recorder,
counters and rankers (record_trace samples exactly as the lab asks: set_seed, then neighbor_loader,
so its counts are the policy's), its presample policy, or the distributed trainer's pre-sampling."""
from grading_cheats import Cheat

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
]
