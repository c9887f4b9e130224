"""Live probes of this machine: NVML, sysfs (IB, PCIe, NUMA), nvidia-smi, NCCL topology XML, env."""
