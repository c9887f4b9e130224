"""Shared types every layer speaks: findings, results, the report, the world of a run; imports nothing else of ours."""
