"""Findings, results and reports: their JSON I/O and renderers (text, JUnit, views); the types live in core."""
