"""ddpdoctor: diagnose and tune PyTorch DistributedDataParallel clusters and scripts."""

import warnings

from ddpdoctor.core.version import __version__

__all__ = ["__version__"]

# The CPU torch wheel does not bring numpy, and importing torch without it warns "Failed to initialize
# NumPy" on every run. ddpdoctor never needs numpy, so that one warning is noise for our users. Set here,
# before any ddpdoctor module imports torch (the CLI, the torchrun workers and probes all import this
# package first).
warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
