"""Runs of other tools (nccl-tests, nvbandwidth, ...) as parsed data and as a ddpdoctor report."""
