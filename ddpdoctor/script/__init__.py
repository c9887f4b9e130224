"""What a script check (a lint rule) reads: one training script parsed, its names and flow, its per-rank run (pure ast)."""
