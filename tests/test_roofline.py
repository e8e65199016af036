"""tools/support/roofline.py: the decode estimator's calibration on aiter's HIP kernel and the model's bounds (pure
Python; our kernels' estimates, which need their ISA, are in tests/test_gfx950_decode.py)."""
from tools.support import roofline as R


def test_the_calibration_lands_within_30_percent_on_at_least_four_measured_rows():
    fit, ratios = R.calibrate()
    assert sum(0.7 <= r <= 1.3 for r in ratios) >= 4, ratios
    assert 1000 <= fit.latency_cycles <= 9600 and fit.overhead_us <= 4


def test_the_host_heuristic_reproduces_the_published_example_configurations():
    # B = 64, next_n = 6, 128K: 3 rows per block, 4 waves, chunk 64; B = 1, next_n = 2, 32K: 1 row, 256 chunk
    assert R.aiter_hip_config(64, 6, 131072) == (4, 64, 3, 4)
    assert R.aiter_hip_config(1, 2, 32768) == (4, 256, 1, 128)


def test_an_estimate_is_never_below_its_memory_floor_and_grows_with_the_work():
    fit = R.Fit(3000.0, 2.0)
    small = R.Launch(4096, 4, 10, 512, 400, 2, 1, 1, 3, 1e9, 1e12)
    big = R.Launch(4096, 4, 20, 512, 400, 2, 1, 1, 3, 2e9, 2e12)
    a, b = R.estimate(small, fit), R.estimate(big, fit)
    assert a.us >= a.memory_floor_us and b.us > a.us
    assert a.memory_floor_us == 1e9 / R.HBM_BYTES_PER_S * 1e6
