"""Industry applications beyond the book (labs 10 and 11), on top of the runtime.

- ``recsys``: LightGCN against matrix factorisation, BPR, recall@k and NDCG@k, PinSAGE neighbourhoods;
- ``sharded_embedding``: a recommender's embedding table sharded in a DistDGL ``DistEmbedding``;
- ``temporal``: spatio-temporal forecasting with index-batching (PGT-I), T-GCN.
"""

__all__ = ["recsys", "sharded_embedding", "temporal"]
