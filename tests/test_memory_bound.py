"""The reference runs the largest real chunk shape within a stated peak memory."""
import pytest

from tools.measure.reference_cost import measure_in_subprocess

PEAK_LIMIT = 2 << 30  # 2 GiB: the 512 MiB output plus a 512 MiB score chunk and the inputs


@pytest.mark.slow
def test_reference_on_1024x131072_h64_stays_under_2_gib():
    r = measure_in_subprocess(1024, 131072, 64)
    assert r["peak_rss_bytes"] < PEAK_LIMIT, r
    assert r["finite"] == sum(131072 - 1024 + m + 1 for m in range(1024))
