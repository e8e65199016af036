"""What the planners know of a device, and the accumulation choices every op takes.

Pure Python: a ``Target`` is a small description (arch, compute units, wave size, grid limit), never a device.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """What the planner knows of a device: its arch, its compute units and wave size, the grid's y limit.

    TARGETS holds the two shipped targets (an H100/H200 and an MI355X); hipindexer.ops.target_of(device)
    builds one from a Device's own CU count.

    >>> Target("sm_90a", num_cus=132, wave_size=32) == TARGETS["sm_90a"]
    True
    """
    arch: str          # "gfx950", "sm_90a"
    num_cus: int       # CUs (AMD) or SMs (NVIDIA)
    wave_size: int     # 64 on CDNA, 32 on NVIDIA
    max_grid_y: int = 65535


TARGETS = {
    "gfx950": Target("gfx950", 256, 64),
    "sm_90a": Target("sm_90a", 132, 32),
}

# "fast": the fastest kernel of any accumulation class; "fp32": fp32-class kernels only (hipindexer.catalog).
ACCUMULATIONS = ("fast", "fp32")


def check_accumulation(accumulation) -> None:
    """ValueError unless `accumulation` is "fast" or "fp32"."""
    if accumulation not in ACCUMULATIONS:
        raise ValueError(f"accumulation: expected one of {list(ACCUMULATIONS)}, got {accumulation!r}")


def forced_int(name: str, value, lo: int, hi: int) -> int:
    """A forced tunable: an int in [lo, hi], else ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{name}: expected an int in [{lo}, {hi}], got {value!r}")
    return value
