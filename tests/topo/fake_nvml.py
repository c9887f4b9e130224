"""A recorded stand-in for ``pynvml``, built from real ``nvidia-smi -q`` output.

No GPU here or in CI, so the NVML probe is tested against this double: every query the probe makes
answers from the parsed fixture (model, UUID, bus id, memory, PCIe generation/width, ECC, remapped
rows, clock event reasons). NVLink per-link answers are synthesized from an ``nvidia-smi topo -m``
matrix of the same machine class (NV18 on HGX H100 = 18 active links per GPU to NVSwitches), since
``nvidia-smi -q`` does not list links. Tests mutate the returned state to inject one fault at a time.
"""

from __future__ import annotations

import types

from ddpdoctor.probes.smi_query import get, parse_smi_query

NVSWITCH_BUSIDS = [f"00000000:{0xA0 + k:02X}:00.0" for k in range(4)]  # synthetic, not GPUs


class NVMLError(Exception):
    def __init__(self, value: int = 3):
        self.value = value
        super().__init__(
            {
                3: "Not Supported",
                9: "Driver Not Loaded",
                12: "NVML Shared Library Not Found",
                15: "GPU is lost",
            }.get(value, "Unknown Error")
        )


def _num(s, default=0):
    try:
        return int(str(s).split()[0].rstrip("x"))
    except (ValueError, IndexError):
        return default


def state_from_smi_q(text: str, nvlinks_per_gpu: int = 0) -> dict:
    header, gpus = parse_smi_query(text)
    state = {"driver": header["Driver Version"], "cuda": header.get("CUDA Version", ""), "gpus": []}
    for g in gpus:
        link = get(g, "PCI", "GPU Link Info") or {}
        remap = g.get("Remapped Rows") or {}
        events = g.get("Clocks Event Reasons") or g.get("Clocks Throttle Reasons") or {}
        state["gpus"].append(
            {
                "name": g["Product Name"],
                "uuid": g.get("GPU UUID", ""),
                "busid": g["Bus Id"],
                "memory_bytes": _num(get(g, "FB Memory Usage", "Total")) * 2**20,
                "cur_gen": _num(get(link, "PCIe Generation", "Current")),
                "max_gen": _num(get(link, "PCIe Generation", "Max")),
                "cur_width": _num(get(link, "Link Width", "Current")),
                "max_width": _num(get(link, "Link Width", "Max")),
                "ecc": get(g, "ECC Mode", "Current") == "Enabled",
                "ecc_volatile_unc": _num(get(g, "ECC Errors", "Volatile", "DRAM Uncorrectable"), None),
                "ecc_aggregate_unc": _num(get(g, "ECC Errors", "Aggregate", "DRAM Uncorrectable"), None),
                "remap": None
                if not remap
                else (
                    _num(remap.get("Correctable Error")),
                    _num(remap.get("Uncorrectable Error")),
                    remap.get("Pending") == "Yes",
                    remap.get("Remapping Failure Occurred") == "Yes",
                ),
                "events": [k for k, v in events.items() if v == "Active"],
                "nvlinks": [[True, NVSWITCH_BUSIDS[k % 4]] for k in range(nvlinks_per_gpu)],
                "numa": None,
            }
        )
    return state


_EVENT_BITS = {
    "Idle": 0x1,
    "Applications Clocks Setting": 0x2,
    "SW Power Cap": 0x4,
    "HW Slowdown": 0x8,
    "Sync Boost": 0x10,
    "SW Thermal Slowdown": 0x20,
    "HW Thermal Slowdown": 0x40,
    "HW Power Brake Slowdown": 0x80,
    "Display Clock Setting": 0x100,
}


def make_pynvml(state: dict | None, init_error: int | None = None) -> types.ModuleType:
    """A module object with the pynvml functions ddpdoctor.probes.nvml calls."""
    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError
    m.NVML_NVLINK_MAX_LINKS = 18
    m.NVML_P2P_CAPS_INDEX_READ = 0
    m.NVML_P2P_CAPS_INDEX_WRITE = 1
    m.calls = []
    gpus = (state or {}).get("gpus", [])

    def nvmlInit():
        if init_error is not None:
            raise NVMLError(init_error)

    def nvml_pci(busid):
        return types.SimpleNamespace(busId=busid.encode())

    def need(cond):
        if not cond:
            raise NVMLError(3)

    def nvlink(h, link):
        need(link < len(gpus[h]["nvlinks"]))
        return gpus[h]["nvlinks"][link]

    def remap(h):
        need(gpus[h]["remap"] is not None)
        return gpus[h]["remap"]

    def level(a, b):
        # HGX H100: GPUs pair up under a PCIe switch (PXB), the halves on different sockets (SYS).
        if a // 4 != b // 4:
            return 50
        return 20 if a // 2 == b // 2 else 40

    m.nvmlInit = nvmlInit
    m.nvmlShutdown = lambda: None
    m.nvmlSystemGetDriverVersion = lambda: state["driver"]

    def cuda_version():  # NVML encodes 12.2 as 12020
        major, _, minor = state.get("cuda", "0.0").partition(".")
        return int(major) * 1000 + int(minor or 0) * 10

    m.nvmlSystemGetCudaDriverVersion = cuda_version
    m.nvmlDeviceGetCount = lambda: len(gpus)
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetName = lambda h: gpus[h]["name"]
    m.nvmlDeviceGetUUID = lambda h: gpus[h]["uuid"]
    m.nvmlDeviceGetPciInfo = lambda h: nvml_pci(gpus[h]["busid"])
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=gpus[h]["memory_bytes"])
    m.nvmlDeviceGetCudaComputeCapability = lambda h: (9, 0)
    m.nvmlDeviceGetEccMode = lambda h: (int(gpus[h]["ecc"]), int(gpus[h]["ecc"]))
    m.nvmlDeviceGetTotalEccErrors = lambda h, kind, counter: (
        gpus[h]["ecc_volatile_unc"] if counter == 0 else gpus[h]["ecc_aggregate_unc"]
    )
    m.nvmlDeviceGetRemappedRows = remap
    m.nvmlDeviceGetCurrentClocksEventReasons = lambda h: sum(_EVENT_BITS.get(e, 0) for e in gpus[h]["events"])
    m.nvmlDeviceGetCurrPcieLinkGeneration = lambda h: gpus[h]["cur_gen"]
    m.nvmlDeviceGetMaxPcieLinkGeneration = lambda h: gpus[h]["max_gen"]
    m.nvmlDeviceGetCurrPcieLinkWidth = lambda h: gpus[h]["cur_width"]
    m.nvmlDeviceGetMaxPcieLinkWidth = lambda h: gpus[h]["max_width"]
    m.nvmlDeviceGetNumaNodeId = lambda h: gpus[h]["numa"] if gpus[h]["numa"] is not None else -1
    m.nvmlDeviceGetNvLinkState = lambda h, link: int(nvlink(h, link)[0])
    m.nvmlDeviceGetNvLinkRemotePciInfo = lambda h, link: nvml_pci(nvlink(h, link)[1])
    m.nvmlDeviceGetTopologyCommonAncestor = level
    m.nvmlDeviceGetP2PStatus = lambda a, b, idx: 0
    return m
