"""Rebuild the snapshots in this folder from tests/fixtures.

Run ``python tests/topo/data/build_snapshots.py`` from the repository root.

See README.md here for what each snapshot is made of.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

FIXTURES = REPO / "tests" / "fixtures"
HERE = Path(__file__).resolve().parent


def write(name: str, node) -> None:
    (HERE / name).write_text(json.dumps(node.to_dict(), indent=1) + "\n")


def main() -> None:
    sys.path.insert(0, str(REPO))  # the repository's packages and tests, run as a plain script
    from ddpdoctor.model.topology.node import IbPort, PeerMemory
    from ddpdoctor.probes.collect import collect_node
    from ddpdoctor.probes.nccl_xml import nccl_to_node, parse_nccl_topo
    from ddpdoctor.probes.smi_topo import parse_topo_matrix, topo_to_node
    from tests.topo.fake_nvml import make_pynvml, state_from_smi_q

    asus = "asus-esc8000a-e12.4x-rtx6000ada.4nic.spaces.txt"
    write(
        "asus-node.json",
        topo_to_node(
            parse_topo_matrix((FIXTURES / "nvidia-smi-topo" / asus).read_text()),
            hostname="asus",
            source=f"nvidia-smi topo -m: {asus}",
        ),
    )
    state = state_from_smi_q(
        (FIXTURES / "nvidia-smi/nvidia-smi-q.h100-80gb-hbm3.x8.535.183.01.txt").read_text(), 18
    )
    xml = nccl_to_node(parse_nccl_topo((FIXTURES / "nccl-topo/azure-ndv5-topo.xml").read_text()))
    for host, name, peermem in (
        ("hgx-a", "hgx-h100-a.json", True),
        ("hgx-b", "hgx-h100-b.json", True),
        ("hgx-c", "hgx-h100-c-nopeermem.json", False),
    ):
        node = collect_node(
            root="/nonexistent", env={}, nvml=make_pynvml(state), hostname=host, dmabuf_probe=False
        )
        node.source = "recorded: nvidia-smi -q H100 (fake NVML) + azure-ndv5-topo.xml NICs"
        node.nics = xml.nics
        for nic in node.nics:
            nic.hca_type = "MT4129"
            nic.ports = [
                IbPort(
                    port=1,
                    state="ACTIVE",
                    phys_state="LinkUp",
                    rate_gbps=400.0,
                    rate_text="400 Gb/sec (4X NDR)",
                    link_layer="InfiniBand",
                )
            ]
        for g in node.gpus:
            for nic in node.nics:
                node.set_path(g.label, nic.name, xml.path(g.label, nic.name))
        node.peermem = PeerMemory(
            found=["/sys/module/nvidia_peermem/version"] if peermem else [],
            probed=True,
            kernel="5.15.0",
            open_kernel_module=False,
        )
        write(name, node)


if __name__ == "__main__":
    main()
