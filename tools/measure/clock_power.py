"""The SM clock, the board's power and its throttle reasons while a call runs back to back, from `nvidia-smi`
sampling beside it: whether a timing is set by the power cap (docs/benchmarks.md, "the power cap").

    runs = under_load(dev, {"the op": op, "logits op": logits}, seconds=4.0)

Each callable of one int (as the benchmarks' timers) runs in batches for about `seconds`, one after another with a
second between them, while `nvidia-smi -i INDEX --query-gpu=timestamp,clocks.sm,power.draw,
clocks_throttle_reasons.active -lms 50` samples the device's GPU (INDEX: the device's index, which is nvidia-smi's
own numbering where CUDA_DEVICE_ORDER=PCI_BUS_ID and CUDA_VISIBLE_DEVICES is unset); a run's samples are those
taken within its batches, its first 0.3 s left out (the clock settles). NVIDIA only: where nvidia-smi is missing,
under_load returns None.
"""
from __future__ import annotations

import datetime
import shutil
import statistics
import subprocess
import tempfile
import time

from hipindexer.bench.timing import time_device

QUERY = "timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active"
SETTLE_S = 0.3
THROTTLE = {0x4: "SW power cap", 0x20: "SW thermal", 0x40: "HW thermal", 0x80: "HW power brake", 0x8: "HW slowdown"}


def parse_samples(lines) -> list[tuple[float, float, float, int]]:
    """(seconds since the epoch, SM MHz, watts, throttle bits) of each `nvidia-smi --query-gpu=QUERY --format=csv,
    noheader` line; lines that are not samples (a header, a line cut short) are skipped. The timestamp is the
    machine's local time, as time.time() is."""
    out = []
    for line in lines:
        p = [x.strip() for x in line.split(",")]
        if len(p) != 4:
            continue
        try:
            t = datetime.datetime.strptime(p[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            out.append((t, float(p[1].split()[0]), float(p[2].split()[0]), int(p[3], 16)))
        except ValueError:
            continue
    return out


def summarize(samples, t0: float, t1: float) -> dict | None:
    """The samples within [t0 + SETTLE_S, t1]: median, lowest and highest SM clock, median power, the throttle
    reasons seen (names, or hex bits); None when there are none."""
    sel = [s for s in samples if t0 + SETTLE_S <= s[0] <= t1]
    if not sel:
        return None
    bits = 0
    for s in sel:
        bits |= s[3]
    reasons = [name for b, name in sorted(THROTTLE.items()) if bits & b]
    rest = bits & ~sum(THROTTLE)
    return {"samples": len(sel), "mhz_median": statistics.median(s[1] for s in sel),
            "mhz_low": min(s[1] for s in sel), "mhz_high": max(s[1] for s in sel),
            "watts_median": statistics.median(s[2] for s in sel),
            "throttle": reasons + ([hex(rest)] if rest else [])}


def under_load(dev, runs: dict, seconds: float = 4.0, calls: int = 50) -> dict | None:
    """{name: {"us": median us a call, plus summarize()'s fields}} for each callable in `runs`, or None without
    nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    out = {}
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen([smi, "-i", str(getattr(dev, "index", 0)), f"--query-gpu={QUERY}",
                                 "--format=csv,noheader", "-lms", "50"], stdout=log)
        try:
            time.sleep(1.0)
            for name, fn in runs.items():
                one = time_device(dev, fn, 1, 3)[-1] * 1e-6  # seconds a call, roughly
                batches = max(3, int(seconds / max(one * calls, 1e-6)))
                t0 = time.time()
                us = time_device(dev, fn, calls, batches)
                out[name] = {"us": statistics.median(us), "window": (t0, time.time())}
                time.sleep(1.0)
        finally:
            proc.terminate()
            proc.wait()
        log.seek(0)
        samples = parse_samples(log)
    for r in out.values():
        r.update(summarize(samples, *r.pop("window")) or {"samples": 0})
    return out
