"""The reference runs the largest real chunk shape within a stated peak memory."""
import pytest

from tools.measure.reference_cost import measure_in_subprocess

PEAK_LIMIT = 2 << 30  # 2 GiB: the 512 MiB output plus a 512 MiB score chunk and the inputs
# What H = 64 holds beyond H = 8 that no chunk size bounds: q (M H D bytes of fp8) and the weights (M H floats).
HEADS_EXTRA = 1024 * (64 - 8) * (128 + 4)


@pytest.mark.slow
def test_reference_on_1024x131072_stays_under_2_gib_with_its_heads_at_the_fewest():
    """The reference's head scores take at most its budget whatever H is (it takes budget / (H N 4) rows at a time),
    so fewer heads mean more rows a chunk and larger row-sized temporaries (the chunk's values and mask): H = 8 is
    the hardest case for the bound, and costs an eighth of the multiply-adds of H = 64. Only the inputs grow with H;
    their growth to H = 64 is added."""
    r = measure_in_subprocess(1024, 131072, 8)
    assert r["peak_rss_bytes"] + HEADS_EXTRA < PEAK_LIMIT, r
    assert r["finite"] == sum(131072 - 1024 + m + 1 for m in range(1024))
