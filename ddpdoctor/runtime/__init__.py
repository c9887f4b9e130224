"""Running checks: the launcher, the per-rank worker and coordinator, watch sessions, the final report."""
