"""Each lab's grading code: what a lab's locked check cell runs in real processes (a spawned rank
imports it from here: it cannot import a notebook cell).  One module per lab, named as the lab:

- ``lab02_message_passing``: a GCN layer and a two-layer GCN, checked against DGL's, and their training loop;
- ``lab03_collectives``: a hand-written all-reduce, on real ranks started inside the student's sandbox;
- ``lab04_minibatch``: a minibatch training step, and a batch size and fanouts chosen;
- ``lab05_feature_cache``: a pre-sampling cache policy, checked;
- ``lab05b_historical_embeddings``: a GAS history table, a batch forward through it, and training with both;
- ``lab06_halo_exchange``: one GCN layer with the student's halo exchange, on real ranks started inside the sandbox;
- ``lab08_distributed_dgl``: an edge cut, a setup for the real distributed job (run by the check), its steps;
- ``lab10_recommendation``: the BPR loss and one LightGCN propagation step;
- ``lab11_spatiotemporal_index_batching``: windows as index ranges, and the peak memory they save;
- ``lab12_feature_loading``: a gather into a reused buffer, and a zero-copy read's PCIe lines;
- ``engine``: grades a lab whose module defines ``CHECKS`` outside the student's kernel;
- ``student``: the student's side of that grading, a process that runs only the solution cells;
- ``ranks``: the student's side of the labs that run real ranks (each loads the solution itself);
- ``training_calls``: the student's side of labs 4 and 5b (a step, a history, training runs with them).
"""

__all__ = ["engine", "lab02_message_passing", "lab03_collectives", "lab04_minibatch", "lab05_feature_cache",
           "lab05b_historical_embeddings", "lab06_halo_exchange", "lab08_distributed_dgl", "lab10_recommendation",
           "lab11_spatiotemporal_index_batching", "lab12_feature_loading", "ranks", "student",
           "training_calls"]
