"""Measured bandwidth: busbw factors, α–β curves, message sizes, the P2P schedule and its verdicts."""
