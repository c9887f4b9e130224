"""Device meshes as plain data: a layout string ("dp=4,tp=8"), the ranks at each mesh coordinate, and
the process groups each mesh dimension makes (pure).

**Layout strings.** ``NAME=SIZE`` items separated by commas, NAME one of ``pp``, ``dp``, ``tp``, each at
most once. The order is the mesh's dimension order, outermost first and innermost last — exactly the
``mesh_shape`` and ``mesh_dim_names`` of ``init_device_mesh``: "dp=4,tp=8" is
``init_device_mesh("cuda", (4, 8), mesh_dim_names=("dp", "tp"))``, whose TP groups are 8 consecutive
ranks; "tp=8,dp=4" makes TP groups of ranks 4 apart.

**Rank to coordinate.** ``init_device_mesh`` lays the world's ranks out row-major: the rank at
coordinate (i0, ..., ik) is sum(i_d * stride_d), stride_d the product of the sizes after d (torch:
``_MeshLayout.from_sizes_strides`` over ``torch.arange(world_size)``). An explicit
``DeviceMesh(device_type, mesh=tensor)`` puts ``tensor[i0, ..., ik]`` there instead. A dimension's
groups are the ranks that differ only in that coordinate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DIMS = ("pp", "dp", "tp")  # also the recommended nesting: PP outermost, TP innermost (Megatron's order)


class LayoutError(ValueError):
    """A layout string that cannot be a mesh for this world."""


@dataclass(frozen=True)
class LayoutSpec:
    dims: tuple[str, ...]
    sizes: tuple[int, ...]

    @property
    def world_size(self) -> int:
        return math.prod(self.sizes)

    def size(self, dim: str) -> int:
        return self.sizes[self.dims.index(dim)] if dim in self.dims else 1

    def __str__(self) -> str:
        return ",".join(f"{d}={s}" for d, s in zip(self.dims, self.sizes))


def parse_layout(text: str, world_size: int | None = None) -> LayoutSpec:
    """Parse "dp=4,tp=8" (see the module docstring). ``world_size``: also check the sizes multiply to it."""
    if not isinstance(text, str) or not text.strip():
        raise LayoutError(f"empty layout {text!r}; expected NAME=SIZE items such as 'dp=4,tp=8'")
    dims: list[str] = []
    sizes: list[int] = []
    for item in text.split(","):
        name, eq, value = item.partition("=")
        name, value = name.strip().lower(), value.strip()
        if not eq or not name:
            raise LayoutError(f"layout item {item.strip()!r} is not NAME=SIZE (e.g. tp=8) in {text!r}")
        if name not in DIMS:
            raise LayoutError(
                f"unknown mesh dimension {name!r} in {text!r}; expected one of {', '.join(DIMS)}"
            )
        if name in dims:
            raise LayoutError(f"mesh dimension {name!r} given twice in {text!r}")
        if not (value.isascii() and value.isdigit()) or int(value) < 1:
            raise LayoutError(f"{name} size {value!r} in {text!r} is not a positive integer")
        dims.append(name)
        sizes.append(int(value))
    spec = LayoutSpec(tuple(dims), tuple(sizes))
    if world_size is not None and spec.world_size != world_size:
        product = " × ".join(f"{d}={s}" for d, s in zip(dims, sizes))
        raise LayoutError(
            f"{product} = {spec.world_size} ranks, but the world has {world_size}; "
            "the sizes must multiply to the world size"
        )
    return spec


@dataclass
class MeshLayout:
    """Ranks on a mesh: ``ranks`` is the mesh flattened row-major (``ranks[k]`` sits at the coordinate
    whose row-major index is k)."""

    dims: tuple[str, ...]
    sizes: tuple[int, ...]
    ranks: list[int]

    def __post_init__(self) -> None:
        if math.prod(self.sizes) != len(self.ranks) or len(self.dims) != len(self.sizes):
            raise LayoutError(f"mesh {self.sizes} does not hold {len(self.ranks)} ranks")

    @classmethod
    def default(cls, spec: LayoutSpec) -> MeshLayout:
        """What ``init_device_mesh`` builds for this spec: ranks 0..n-1 row-major."""
        return cls(spec.dims, spec.sizes, list(range(spec.world_size)))

    @property
    def is_default(self) -> bool:
        return self.ranks == list(range(len(self.ranks)))

    @property
    def spec(self) -> LayoutSpec:
        return LayoutSpec(self.dims, self.sizes)

    def groups(self, dim: str) -> list[list[int]]:
        """The process groups of one dimension, each in mesh order, in the order DeviceMesh lists them."""
        d = self.dims.index(dim)
        stride = math.prod(self.sizes[d + 1 :])
        size = self.sizes[d]
        return [
            [self.ranks[base + k * stride] for k in range(size)]
            for base in range(len(self.ranks))
            if (base // stride) % size == 0
        ]

    def nested(self) -> list:
        """The mesh as nested lists (the tensor to give ``DeviceMesh(mesh=...)``)."""
        out: list = list(self.ranks)
        for size in reversed(self.sizes[1:]):
            out = [out[k : k + size] for k in range(0, len(out), size)]
        return out

    def to_dict(self) -> dict:
        return {
            "dims": list(self.dims),
            "sizes": list(self.sizes),
            "mesh": self.nested(),
            "init_device_mesh": self.is_default,
            "groups": {d: self.groups(d) for d in self.dims},
        }
