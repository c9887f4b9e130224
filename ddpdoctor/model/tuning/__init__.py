"""Tuning models: DDP gradient buckets replayed and simulated, NCCL's all_reduce cost model."""
