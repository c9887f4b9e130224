"""Path type between two PCI devices from their bridge chains (pure).

Both probes use it: sysfs gives each device's chain of bridges under its host bridge (from the
resolved ``/sys/bus/pci/devices/<bdf>`` link), NCCL's topology XML gives the nesting of ``<pci>``
elements under a ``<cpu>``. The answer uses the ``nvidia-smi topo -m`` words (DESIGN.md §5).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PciPlace:
    """Where a device sits: its NUMA node, its host bridge / root complex, and the bridges above it
    (top first, the device itself excluded)."""

    numa: int | None
    root: str
    bridges: tuple[str, ...] = field(default_factory=tuple)


def pci_path_type(a: PciPlace, b: PciPlace) -> str:
    """PIX: at most one switch between them; PXB: several bridges but no host bridge; PHB: through
    their shared host bridge; NODE: across host bridges of one NUMA node; SYS: across NUMA nodes."""
    common = 0
    for x, y in zip(a.bridges, b.bridges):
        if x != y:
            break
        common += 1
    if a.root == b.root and common:
        below_a = len(a.bridges) - common
        below_b = len(b.bridges) - common
        # Devices straight under one switch (its downstream ports at most) cross a single bridge.
        return "PIX" if below_a <= 1 and below_b <= 1 else "PXB"
    if a.root == b.root:
        return "PHB"
    # Unknown NUMA nodes count as different: assume the far case rather than hide one.
    return "NODE" if a.numa is not None and a.numa == b.numa else "SYS"
