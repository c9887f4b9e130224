"""Test beds for tests and benchmarks (not shipped): emulated nodes in network namespaces, a real Slurm on them."""
