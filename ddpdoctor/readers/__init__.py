"""Readers of files users hand in (other tools' outputs, hang evidence), apart from live probes."""
