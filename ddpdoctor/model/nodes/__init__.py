"""Saying things in nodes: Slurm hostlists, values that differ across nodes, the nodes a verdict blames."""
