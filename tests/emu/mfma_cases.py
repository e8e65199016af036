"""The gfx950 MFMA prefill kernel (hsaco_src/gfx950/mqa_logits_mfma.hip) on the emulated MI355X
(run by tests/test_gfx950_prefill.py in a child pytest with -p emu_session, whose HIP is the emulator).

The quick CLI sweep reaches it through the planner; these cases force what the planner's choice
for small shapes does not reach: many LDS chunks per part (split=1 over 700 keys: 6 chunks, both
buffers in turn), odd splits whose parts start and end inside a chunk, both row orders, a row
block tail, a wider output row stride, and windows past N."""
import numpy as np
import pytest

from hipindexer import fp8_mqa_logits, testing
from hipindexer.gate import gate_prefill
from hipindexer.ops import target_of
from hipindexer.plan import plan_prefill
from hipindexer.runtime import Device, DeviceArray

DEV = Device("emu:gfx950")
KERNEL = "mqa_logits_mfma"


def _check(M, N, H, mode, clean, seed=0, pad=0, **tunables):
    inp = testing.prefill_inputs(np.random.default_rng(seed), M, N, H, 128, mode)
    wide = DeviceArray.empty((M, N + pad), np.float32, DEV).fill(np.nan)
    out = wide[:, :N] if pad else wide
    fp8_mqa_logits(*inp.args(), clean_logits=clean, out=out, device=DEV, kernel=KERNEL, **tunables)
    got = wide.numpy()
    if pad:
        assert np.isnan(got[:, N:]).all(), "wrote into the row padding"
        got = got[:, :N]
    g = gate_prefill(got, inp, clean, "fp32")
    assert g, g.message


@pytest.mark.parametrize("H", [32, 64])
def test_the_planner_picks_the_mfma_kernel(H):
    for M, N in [(1, 1), (17, 76), (61, 256), (1024, 131072)]:
        assert plan_prefill(M, N, H, 128, target_of(DEV)).kernel == KERNEL
    assert plan_prefill(61, 256, 16, 128, target_of(DEV)).kernel == "mqa_logits_generic"


@pytest.mark.parametrize("H", [32, 64])
@pytest.mark.parametrize("mode", ["causal", "multi_req", "past_end"])
@pytest.mark.parametrize("clean", [True, False])
def test_many_chunks_per_part(H, mode, clean):
    _check(21, 700, H, mode, clean, split=1)


@pytest.mark.parametrize("H", [32, 64])
@pytest.mark.parametrize("split,reverse", [(3, True), (7, False), (22, True)])
def test_odd_splits_and_row_orders(H, split, reverse):
    _check(37, 700, H, "multi_req", True, seed=split, split=split, reverse_rows=reverse)
    _check(37, 700, H, "misaligned", False, seed=split + 1, split=split, reverse_rows=reverse)


@pytest.mark.parametrize("H", [32, 64])
def test_wider_out_stride_keeps_its_padding(H):
    _check(13, 300, H, "causal", True, pad=7, split=2)
    _check(13, 300, H, "empty", False, pad=7)
