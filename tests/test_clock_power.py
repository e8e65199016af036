"""tools/measure/clock_power.py: nvidia-smi's samples read back and cut to a run's window, on the CPU."""
import datetime

from tools.measure import clock_power as C


def _line(t, mhz, watts, bits):
    stamp = datetime.datetime.fromtimestamp(t).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
    return f"{stamp}, {mhz} MHz, {watts:.2f} W, 0x{bits:016x}\n"


def test_a_runs_samples_are_those_within_its_window_after_the_clock_settles():
    t0 = 1_800_000_000.0
    lines = ["timestamp, clocks.current.sm [MHz], power.draw [W], clocks_throttle_reasons.active\n",
             _line(t0 - 1.0, 1980, 120.0, 0x1),   # idle before the run
             _line(t0 + 0.1, 1980, 300.0, 0x0),   # within the settling time
             _line(t0 + 0.5, 1500, 695.0, 0x4),
             _line(t0 + 1.0, 1545, 698.0, 0x4),
             _line(t0 + 1.5, 1185, 699.0, 0x4 | 0x200),
             "2026/12/05 18:39:56.744, 1980 MHz\n",  # cut short
             _line(t0 + 3.0, 1980, 110.0, 0x1)]   # after it
    samples = C.parse_samples(lines)
    assert len(samples) == 6 and all(abs(s[0] - t) < 1e-3 for s, t in zip(samples[:2], (t0 - 1.0, t0 + 0.1)))
    s = C.summarize(samples, t0, t0 + 2.0)
    assert s == {"samples": 3, "mhz_median": 1500.0, "mhz_low": 1185.0, "mhz_high": 1545.0, "watts_median": 698.0,
                 "throttle": ["SW power cap", "0x200"]}
    assert C.summarize(samples, t0 + 10, t0 + 20) is None


def test_without_nvidia_smi_there_is_nothing_to_sample(monkeypatch):
    monkeypatch.setattr(C.shutil, "which", lambda name: None)
    assert C.under_load(None, {"x": lambda i: None}) is None
