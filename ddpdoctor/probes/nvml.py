"""NVIDIA GPUs through NVML (``pynvml`` from the nvidia-ml-py package), imported lazily.

``read_nvml()`` returns the GPUs with their PCIe link, ECC, retired pages, throttle reasons and NVLinks,
plus GPU↔GPU path types and P2P status. No library, no driver or no GPU raises :class:`NoGpu` with the
reason; a query a GPU does not support leaves that field ``None``. Tests inject a fake ``pynvml``
module built from fixture data (tests/topo/fake_nvml.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.model.topology.node import Gpu, NvLink, PcieLink, normalize_busid


class NoGpu(Exception):
    """No NVIDIA GPU can be seen here; the message says why (no library, no driver, none present)."""


# NVML topology levels (nvmlGpuTopologyLevel_t) in the nvidia-smi words.
_TOPO_LEVELS = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
# Clock event (throttle) reason bits, nvml.h nvmlClocksEventReason*.
_THROTTLE_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


@dataclass
class NvmlReading:
    driver_version: str
    cuda_driver_version: str
    gpus: list[Gpu]
    paths: dict[tuple[str, str], str] = field(default_factory=dict)
    p2p: dict[tuple[str, str], bool] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _s(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def _try(nvml, fn, *args, default=None):
    """Call an NVML query; NotSupported / NoPermission / unknown function → default."""
    f = getattr(nvml, fn, None)
    if f is None:
        return default
    try:
        return f(*args)
    except nvml.NVMLError:
        return default


def _import_nvml():
    try:
        import pynvml
    except ImportError:
        raise NoGpu("no NVIDIA GPU: the nvidia-ml-py package (pynvml) is not installed") from None
    return pynvml


def read_nvml(nvml=None) -> NvmlReading:
    nvml = nvml or _import_nvml()
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as e:
        raise NoGpu(f"no NVIDIA GPU: NVML could not start ({e})") from None
    try:
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as e:
            raise NoGpu(f"no NVIDIA GPU: NVML cannot count devices ({e})") from None
        if count == 0:
            raise NoGpu("no NVIDIA GPU: NVML sees 0 devices")
        cuda = _try(nvml, "nvmlSystemGetCudaDriverVersion")
        reading = NvmlReading(
            driver_version=_s(_try(nvml, "nvmlSystemGetDriverVersion", default="")),
            cuda_driver_version=f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else "",
            gpus=[],
        )
        handles = {}
        for i in range(count):
            # One GPU that fell off the bus must not hide the others: record it and go on.
            try:
                handles[i] = nvml.nvmlDeviceGetHandleByIndex(i)
                reading.gpus.append(_read_gpu(nvml, i, handles[i]))
            except nvml.NVMLError as e:
                handles.pop(i, None)
                reading.gpus.append(Gpu(index=i, nvml_error=str(e)))
        for i, hi in handles.items():
            for j, hj in ((j, hj) for j, hj in handles.items() if j > i):
                level = _try(nvml, "nvmlDeviceGetTopologyCommonAncestor", hi, hj)
                if level is not None:
                    reading.paths[(f"GPU{i}", f"GPU{j}")] = _TOPO_LEVELS.get(int(level), "SYS")
                ok = [
                    _try(nvml, "nvmlDeviceGetP2PStatus", hi, hj, idx)
                    for idx in (
                        _const(nvml, "NVML_P2P_CAPS_INDEX_READ", 0),
                        _const(nvml, "NVML_P2P_CAPS_INDEX_WRITE", 1),
                    )
                ]
                if None not in ok:
                    reading.p2p[(f"GPU{i}", f"GPU{j}")] = all(s == 0 for s in ok)  # NVML_P2P_STATUS_OK
        return reading
    finally:
        _try(nvml, "nvmlShutdown")


def _const(nvml, name: str, default: int) -> int:
    v = getattr(nvml, name, default)
    return v[0] if isinstance(v, tuple) else v  # some pynvml versions define these as 1-tuples


def _read_gpu(nvml, index: int, h) -> Gpu:
    pci = nvml.nvmlDeviceGetPciInfo(h)
    busid = normalize_busid(_s(pci.busId))
    mem = _try(nvml, "nvmlDeviceGetMemoryInfo", h)
    cc = _try(nvml, "nvmlDeviceGetCudaComputeCapability", h)
    ecc = _try(nvml, "nvmlDeviceGetEccMode", h)
    unc = _const(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    gpu = Gpu(
        index=index,
        name=_s(nvml.nvmlDeviceGetName(h)),
        uuid=_s(_try(nvml, "nvmlDeviceGetUUID", h, default="")),
        busid=busid,
        memory_MiB=int(mem.total) // 2**20 if mem is not None else None,
        compute_capability=f"{cc[0]}.{cc[1]}" if cc else "",
        pcie=PcieLink(
            cur_gen=_try(nvml, "nvmlDeviceGetCurrPcieLinkGeneration", h),
            max_gen=_try(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", h),
            cur_width=_try(nvml, "nvmlDeviceGetCurrPcieLinkWidth", h),
            max_width=_try(nvml, "nvmlDeviceGetMaxPcieLinkWidth", h),
        ),
        ecc_enabled=bool(ecc[0]) if ecc else None,
        ecc_uncorrected_volatile=_try(
            nvml, "nvmlDeviceGetTotalEccErrors", h, unc, _const(nvml, "NVML_VOLATILE_ECC", 0)
        ),
        ecc_uncorrected_aggregate=_try(
            nvml, "nvmlDeviceGetTotalEccErrors", h, unc, _const(nvml, "NVML_AGGREGATE_ECC", 1)
        ),
    )
    _read_retirement(nvml, h, gpu)
    reasons = _try(nvml, "nvmlDeviceGetCurrentClocksEventReasons", h)
    if reasons is None:
        reasons = _try(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", h)
    gpu.throttle_reasons = [name for bit, name in _THROTTLE_BITS.items() if reasons and reasons & bit]
    numa = _try(nvml, "nvmlDeviceGetNumaNodeId", h)
    gpu.numa_node = numa if isinstance(numa, int) and numa >= 0 else None
    words = _try(nvml, "nvmlDeviceGetCpuAffinity", h, 16)  # 16 × 64-bit words: 1024 CPUs
    if words:
        gpu.cpu_affinity = [
            w * 64 + b for w, word in enumerate(words) for b in range(64) if int(word) >> b & 1
        ]
    gpu.nvlinks = _read_nvlinks(nvml, h)
    return gpu


def _read_retirement(nvml, h, gpu: Gpu) -> None:
    """Row remapping (Ampere and later), else retired pages (Volta and earlier)."""
    remap = _try(nvml, "nvmlDeviceGetRemappedRows", h)
    if remap is not None:
        corr, unc, pending, failure = remap
        gpu.retired_pages, gpu.retired_pending, gpu.remap_failure = (
            int(corr) + int(unc),
            bool(pending),
            bool(failure),
        )
        return
    dbe = _try(
        nvml,
        "nvmlDeviceGetRetiredPages",
        h,
        _const(nvml, "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1),
    )
    if dbe is not None:
        gpu.retired_pages = len(dbe)
        pending = _try(nvml, "nvmlDeviceGetRetiredPagesPendingStatus", h)
        gpu.retired_pending = bool(pending) if pending is not None else None


def _read_nvlinks(nvml, h) -> list[NvLink]:
    links: list[NvLink] = []
    for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
        state = _try(nvml, "nvmlDeviceGetNvLinkState", h, link)
        if state is None:
            continue  # NotSupported: this GPU has no such link
        remote = _try(nvml, "nvmlDeviceGetNvLinkRemotePciInfo", h, link)
        busid = None
        if remote is not None:
            try:
                busid = normalize_busid(_s(remote.busId))
            except ValueError:
                busid = None
        links.append(NvLink(link=link, active=bool(state), remote_busid=busid))
    return links
