"""CPU time the hypervisor took from this machine while a plan ran (Linux's ``steal``).

On a virtual machine the host may run other guests on the CPUs this one believes it has; Linux
counts that time as ``steal`` in the first line of ``/proc/stat`` (fields: user nice system idle
iowait irq softirq steal ...). A measured step taken while a fifth of the CPU time was stolen
says more about the host than about the plan, so ``plan --run`` records the stolen fraction of
each pass beside its step (``measured_steal_passes``).

>>> fraction_between((100, 10), (300, 60))   # 200 ticks passed, 50 of them stolen
0.25
>>> fraction_between(None, (300, 60)) is None
True
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Optional, Tuple

STAT = "/proc/stat"


def cpu_ticks(path: str = STAT) -> Optional[Tuple[int, int]]:
    """(all CPU ticks, stolen ticks) since boot; None where the kernel does not say (not Linux,
    or a kernel without the steal field)."""
    try:
        with open(path) as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    ticks = [int(v) for v in fields[1:9]]   # user nice system idle iowait irq softirq steal
    return sum(ticks), ticks[7]


def fraction_between(before, after) -> Optional[float]:
    """Stolen share of the CPU ticks between two ``cpu_ticks`` readings (None without both)."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    return round((after[1] - before[1]) / (after[0] - before[0]), 4)


@contextmanager
def steal_meter(out: dict, key: str = "steal_fraction"):
    """``out[key]``: the stolen share of CPU time over the ``with`` block (None where unknown)."""
    before = cpu_ticks()
    try:
        yield out
    finally:
        out[key] = fraction_between(before, cpu_ticks())


__all__ = ["cpu_ticks", "fraction_between", "steal_meter"]
