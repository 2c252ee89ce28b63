"""Graph basics (book chapters 1 and 2): how a graph is stored, how far a GNN reaches, what it costs.

- ``storage``: COO, CSR and CSC and their bytes (2.1);
- ``neighbourhood``: receptive fields and neighbour explosion (1.2);
- ``sizing``: the memory calculator for embedding tables, activations and training state (1.2, 7.7);
- ``normalisation``: GCN's symmetric normalisation ``D^-1/2 A D^-1/2``, the one copy every GCN here uses (2.3).
"""

__all__ = ["neighbourhood", "normalisation", "sizing", "storage"]
