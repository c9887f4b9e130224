"""How long the topology probes and parsers take (prints figures; no targets asserted).

    python benchmarks/topo_probe.py            # from the repository root

Figures: each parser on each fixture in tests/fixtures, this machine's probe (NVML + sysfs), the probe against
the recorded 8× H100 NVML double, and the offline diagnosis of three fixture snapshots. Median of N runs.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
N = 20


def timed(fn) -> float:
    runs = []
    for _ in range(N):
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return statistics.median(runs) * 1e3


def main() -> None:
    sys.path.insert(0, str(REPO))
    from ddpdoctor.model.topology.node import NodeTopology
    from ddpdoctor.probes.collect import collect_node
    from ddpdoctor.probes.ibstat import parse_ib_tool_output
    from ddpdoctor.probes.nccl_xml import nccl_to_node, parse_nccl_topo
    from ddpdoctor.probes.smi_topo import parse_topo_matrix, topo_to_node
    from ddpdoctor.runtime.topo_offline import diagnose
    from tests.topo.fake_nvml import make_pynvml, state_from_smi_q

    if not FIXTURES.is_dir():
        sys.exit(f"no fixtures at {FIXTURES}")
    rows = []
    for f in sorted((FIXTURES / "nvidia-smi-topo").iterdir()):
        text = f.read_text()
        rows.append((f"topo -m {f.name}", timed(lambda t=text: topo_to_node(parse_topo_matrix(t)))))
    for f in sorted((FIXTURES / "nccl-topo").glob("*-topo*.xml")):
        text = f.read_text()
        rows.append((f"NCCL XML {f.name}", timed(lambda t=text: nccl_to_node(parse_nccl_topo(t)))))
    text = (FIXTURES / "infiniband/ibstat/ibstat.47.0.h100.some.down.0").read_text()
    rows.append(("ibstat h100.some.down.0", timed(lambda: parse_ib_tool_output(text))))
    rows.append(("collect_node: this machine", timed(lambda: collect_node(dmabuf_probe=False))))
    state = state_from_smi_q(
        (FIXTURES / "nvidia-smi/nvidia-smi-q.h100-80gb-hbm3.x8.535.183.01.txt").read_text(), 18
    )
    rows.append(
        (
            "collect_node: recorded 8x H100 NVML",
            timed(lambda: collect_node(nvml=make_pynvml(state), dmabuf_probe=False)),
        )
    )
    data = REPO / "tests/topo/data"
    snaps = [
        json.loads((data / f).read_text())
        for f in ("hgx-h100-a.json", "hgx-h100-b.json", "hgx-h100-c-nopeermem.json")
    ]
    rows.append(
        (
            "diagnose 3 snapshots (7 checks)",
            timed(lambda: diagnose([NodeTopology.from_dict(s) for s in snaps])),
        )
    )
    width = max(len(r[0]) for r in rows)
    print(f"{'what':<{width}}  median ms (of {N})")
    for name, ms in rows:
        print(f"{name:<{width}}  {ms:8.2f}")


if __name__ == "__main__":
    main()
