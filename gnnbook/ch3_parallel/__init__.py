"""Book chapter 3, distributed machine learning: the parallel forms on real processes (gloo, CPU).

- ``data_parallel``: gradient all-reduce (DDP) and a parameter server (3.2.1, 3.3.1);
- ``model_parallel``: layers on different ranks (3.2.2); ``pipeline``: GPipe micro-batches and the bubble (3.2.3);
- ``tensor_parallel``: Megatron's split MLP (3.2.4); ``expert_parallel``: top-1 mixture of experts (3.2.5);
- ``sharded``: fully sharded data parallelism, ZeRO-3 / FSDP (3.2.6);
- ``sync``: BSP, ASP and SSP on a parameter server with a straggler (3.3.2);
- ``toy``: the seeded problem every form trains, and its one-process reference.

Every form runs through :func:`gnnbook.base.launch.run`.
"""

__all__ = ["data_parallel", "expert_parallel", "model_parallel", "pipeline", "sharded", "sync", "tensor_parallel",
           "toy"]
