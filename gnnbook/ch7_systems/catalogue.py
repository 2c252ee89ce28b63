"""The GNN training systems that book sections 7.3 to 7.6 survey, as data.

Book: 7.3 to 7.6 the systems.

Used in: chapters/07_gnn_systems.ipynb.

One row per system: the paper (first author, venue, year), the hardware setting (single machine
with several GPUs, GPU cluster, CPU cluster, other hardware), the training method (full-graph or
minibatch; inference for accelerators built for it), the model update strategy (synchronous or
asynchronous / stale), the main technique, and the headline result **with the setting it was
measured in and where the paper states it**.

A number is quoted only where the paper's abstract states it in those words; otherwise the row
describes the result qualitatively (what is faster than what, on which hardware) and says
where to read the numbers.  The setting column is this course's grouping by hardware, which
follows the book's section titles; it is not a quotation of the book.

Example:
    >>> row = next(r for r in SYSTEMS if r["name"] == "DistDGL")
    >>> row["venue"], row["year"], row["training"]
    ('IA3 workshop at SC', 2020, 'minibatch')
"""
from __future__ import annotations

__all__ = ["SETTINGS", "TRAINING", "FIELDS", "SYSTEMS", "systems_table"]

SETTINGS = ("single machine, multi-GPU", "GPU cluster", "CPU cluster", "other hardware")  # sections 7.3-7.6
TRAINING = ("minibatch", "full-graph", "inference")
FIELDS = ("name", "paper", "venue", "year", "setting", "training", "update", "technique", "headline", "source")


def _row(name, paper, venue, year, setting, training, update, technique, headline, source) -> dict:
    return dict(zip(FIELDS, (name, paper, venue, year, setting, training, update, technique, headline, source)))


SYSTEMS: list[dict] = [
    # 7.3 single machine, several GPUs
    _row("NeuGraph", "Ma et al., NeuGraph: Parallel Deep Neural Network Computation on Large Graphs",
         "USENIX ATC", 2019, SETTINGS[0], "full-graph", "synchronous",
         "SAGA-NN vertex programs; 2D chunking of the graph streamed through GPU memory; chained multi-GPU streaming",
         "trains GNNs on graphs larger than one GPU's memory and runs faster than TensorFlow-based implementations "
         "on the same multi-GPU server (qualitative here)",
         "abstract; evaluation section for the numbers"),
    _row("PaGraph", "Lin et al., PaGraph: Scaling GNN Training on Large Graphs via Computation-aware Caching",
         "ACM SoCC", 2020, SETTINGS[0], "minibatch", "synchronous",
         "out-degree-ranked feature cache in spare GPU memory; partitions that keep each GPU's sampling local",
         "up to 96.8% less data-loading time and up to 4.8x faster training than the state-of-the-art baselines",
         "abstract (multi-GPU server, sampled GraphSAGE/GCN training)"),
    _row("GNNLab", "Yang et al., GNNLab: A Factored System for Sample-based GNN Training over GPUs",
         "EuroSys", 2022, SETTINGS[0], "minibatch", "synchronous",
         "space sharing: some GPUs sample, others train; PreSC, a cache ranked by pre-sampled access counts",
         "faster than DGL and PyG and than its own time-sharing design on one multi-GPU machine (qualitative here)",
         "abstract; evaluation section for the numbers"),
    _row("SALIENT", "Kaler et al., Accelerating Training and Inference of Graph Neural Networks with Fast "
         "Sampling and Pipelining", "MLSys", 2022, SETTINGS[0], "minibatch", "synchronous",
         "a faster neighbour sampler, shared-memory parallel batch preparation, transfers pipelined with compute",
         "removes most of the data-preparation stall of a PyG baseline, so that an epoch approaches the GPU compute "
         "time (qualitative here)", "abstract; evaluation section for the numbers"),
    _row("DGL-KE", "Zheng et al., DGL-KE: Training Knowledge Graph Embeddings at Scale",
         "SIGIR", 2020, SETTINGS[0], "minibatch",
         "optional asynchronous update of entity embeddings, overlapped with the next batch",
         "knowledge-graph embeddings: METIS partitioning, joint negative sampling, a key-value store for embeddings",
         "Freebase (86M nodes, 338M edges) embedded in 100 minutes on one 8-GPU EC2 instance and in 30 minutes on "
         "4 machines with 48 cores each; 2x to 5x faster than the best competing approaches",
         "abstract (also runs on CPU clusters)"),
    # 7.4 GPU clusters
    _row("ROC", "Jia et al., Improving the Accuracy, Scalability, and Performance of Graph Neural Networks with Roc",
         "MLSys", 2020, SETTINGS[1], "full-graph", "synchronous",
         "partitioning balanced by a learned (linear-regression) cost model; a memory manager that decides which "
         "tensors stay in GPU memory",
         "full-graph training on multiple GPUs and machines, faster than NeuGraph and with higher accuracy than "
         "sampling-based training (qualitative here)", "abstract; evaluation section for the numbers"),
    _row("CAGNET", "Tripathy et al., Reducing Communication in Graph Neural Network Training",
         "SC", 2020, SETTINGS[1], "full-graph", "synchronous",
         "operator (SpMM) parallelism with 1D, 1.5D, 2D and 3D partitionings of the adjacency matrix",
         "communication volume falls as the partitioning dimension grows; 2D/3D scale further on GPU clusters "
         "(qualitative here)", "abstract and analysis section (volume formulas; chapter 6 measures them)"),
    _row("P3", "Gandhi & Iyer, P3: Distributed Deep Graph Learning at Scale",
         "OSDI", 2021, SETTINGS[1], "minibatch", "synchronous (pipelined)",
         "features partitioned by column; the first layer model-parallel (partial activations), the rest data-parallel",
         "faster than DGL when features are wide, because partial activations replace remote feature pulls "
         "(qualitative here; chapter 5c measures the bytes)", "abstract; evaluation section for the numbers"),
    _row("NeutronStar", "Wang et al., NeutronStar: Distributed GNN Training with Hybrid Dependency Management",
         "SIGMOD", 2022, SETTINGS[1], "full-graph", "synchronous",
         "per dependency, cache it (replicate and recompute) or communicate it, chosen by a cost model",
         "faster than systems that only cache or only communicate dependencies, on GPU clusters (qualitative here)",
         "abstract; evaluation section for the numbers"),
    _row("BGL", "Liu et al., BGL: GPU-Efficient GNN Training by Optimizing Graph Data I/O and Preprocessing",
         "NSDI", 2023, SETTINGS[1], "minibatch", "synchronous",
         "a dynamic GPU feature cache with proximity-aware ordering of seeds; partitioning for sampling; isolated "
         "resources for preprocessing stages",
         "higher GPU utilisation and faster epochs than existing GNN training systems (qualitative here)",
         "abstract; evaluation section for the numbers"),
    # 7.5 CPU clusters
    _row("AliGraph", "Zhu et al., AliGraph: A Comprehensive Graph Neural Network Platform",
         "PVLDB 12(12)", 2019, SETTINGS[2], "minibatch", "not stated here (see the paper)",
         "distributed graph storage with caching of important vertices' neighbours; sampling and operator layers",
         "runs GNNs on Alibaba's large e-commerce graphs in production (qualitative here)",
         "abstract; system and evaluation sections"),
    _row("DistDGL", "Zheng et al., DistDGL: Distributed Graph Neural Network Training for Billion-Scale Graphs",
         "IA3 workshop at SC", 2020, SETTINGS[2], "minibatch", "synchronous",
         "METIS partitions with co-located graph servers, samplers and trainers; a distributed key-value store "
         "for features and sparse embeddings",
         "13 s per epoch on a graph of 100 million nodes and 3 billion edges on 16 machines; linear speedup "
         "without loss of accuracy", "abstract (CPU cluster)"),
    _row("DistGNN", "Md et al., DistGNN: Scalable Distributed Training for Large-Scale Graph Neural Networks",
         "SC", 2021, SETTINGS[2], "full-graph", "synchronous, and delayed partial aggregates (cd-r)",
         "shared-memory kernel optimisations; vertex-cut (Libra) partitioning; delayed remote aggregates",
         "up to 3.7x speed-up on a single CPU socket and up to 97x with 128 CPU sockets, both over baseline DGL "
         "on one socket", "abstract (full-batch training on Reddit, OGB-Products, OGB-Papers and Proteins)"),
    _row("ByteGNN", "Zheng et al., ByteGNN: Efficient Graph Neural Network Training at Large Scale",
         "PVLDB 15(6)", 2022, SETTINGS[2], "minibatch", "synchronous",
         "sampling as a DAG of small tasks; two-level scheduling; partitioning tailored to sampling locality",
         "faster than existing distributed GNN systems such as DistDGL on CPU clusters (qualitative here)",
         "abstract; evaluation section for the numbers"),
    # 7.6 other hardware
    _row("Dorylus", "Thorpe et al., Dorylus: Affordable, Scalable, and Accurate GNN Training with Distributed CPU "
         "Servers and Serverless Threads", "OSDI", 2021, SETTINGS[3], "full-graph", "asynchronous (bounded staleness)",
         "graph operations on CPU servers, tensor operations on serverless (Lambda) threads, pipelined",
         "more performance per dollar than CPU-only and GPU-only servers (qualitative here)",
         "abstract; evaluation section for the numbers"),
    _row("HyGCN", "Yan et al., HyGCN: A GCN Accelerator with Hybrid Architecture",
         "HPCA", 2020, SETTINGS[3], "inference", "n/a (inference)",
         "an accelerator with separate engines for the sparse aggregation and the dense combination phases",
         "large speed-ups and energy savings over PyG on a CPU and on a GPU, in simulation (qualitative here)",
         "abstract; evaluation section for the numbers"),
    _row("GraphACT", "Zeng & Prasanna, GraphACT: Accelerating GCN Training on CPU-FPGA Heterogeneous Platforms",
         "FPGA", 2020, SETTINGS[3], "minibatch", "synchronous",
         "subgraph (GraphSAINT-style) minibatches; redundancy reduction in aggregation; CPU-FPGA task split",
         "faster training than CPU and GPU baselines at lower power (qualitative here)",
         "abstract; evaluation section for the numbers"),
]


def systems_table(setting: str | None = None, training: str | None = None):
    """The rows as a pandas DataFrame, optionally only one ``setting`` and/or ``training`` method.

    Example:
        >>> list(systems_table(setting="CPU cluster", training="full-graph").index)
        ['DistGNN']
    """
    import pandas as pd

    if setting is not None and setting not in SETTINGS:
        raise ValueError(f"unknown setting {setting!r}; choose one of {SETTINGS}")
    if training is not None and training not in TRAINING:
        raise ValueError(f"unknown training method {training!r}; choose one of {TRAINING}")
    rows = [r for r in SYSTEMS if (setting is None or r["setting"] == setting)
            and (training is None or r["training"] == training)]
    return pd.DataFrame(rows, columns=list(FIELDS)).set_index("name")
