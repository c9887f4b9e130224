"""ddpdoctor: diagnose and tune PyTorch DistributedDataParallel clusters and scripts."""

__version__ = "0.1.0"
