"""plan_decode: pure Python from host shapes, an explicit split_kv honoured exactly, the grid within what
every target can launch, accumulation classes, and fast paths registered ahead of the generic kernel."""
import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hipindexer import catalog
from hipindexer.plan import TARGETS
from hipindexer.plan import decode as decode_plan
from hipindexer.plan.decode import GENERIC_DECODE, DecodeKernelSpec, plan_decode, register_decode
from hipindexer.plan.menu import KernelMenu

SHAPE = dict(B=st.integers(1, 4096), next_n=st.integers(1, 8), H=st.integers(1, 128),
             D=st.sampled_from([16, 64, 128, 256, 1024]), block_size=st.sampled_from([1, 2, 7, 16, 64, 256, 1024]),
             max_model_len=st.integers(1, 1 << 20), arch=st.sampled_from(sorted(TARGETS)))


@settings(deadline=None, derandomize=True, max_examples=300)
@given(**SHAPE)
def test_the_default_grid_fits_the_work_and_the_target(B, next_n, H, D, block_size, max_model_len, arch):
    t = TARGETS[arch]
    plan = plan_decode(B, next_n, H, D, block_size, max_model_len, t)
    spec = decode_plan.DECODE.by_key[plan.kernel]
    tiles = -(-max_model_len // plan.tile)
    assert plan.grid == (plan.units, 1, 1)
    assert 1 <= plan.split_kv <= max(1, tiles)                    # no unit left without a possible tile
    assert plan.units * plan.block < 1 << 32                      # AMD counts the grid in threads
    if spec.persistent:  # one unit per SM at most, never more units than tiles
        assert plan.units <= min(t.num_cus, B * tiles) and plan.split_kv == -(-plan.units // B)
        assert plan.tile == spec.stage_keys and plan.head_pass == spec.head_pass
    elif spec.page:  # MFMA kernels: every head of a row per pass, 64-key pages
        assert plan.units == B * plan.split_kv
        assert plan.split_kv == 1 or plan.units <= GENERIC_DECODE.units_per_cu * t.num_cus + B
        assert plan.head_pass == H and plan.tile == 64
    else:
        assert plan.units == B * plan.split_kv
        assert plan.split_kv == 1 or plan.units <= GENERIC_DECODE.units_per_cu * t.num_cus + B
        assert plan.head_pass in (2, 4, 8, 16) and plan.head_pass * D <= 16 * 128
        assert 1 <= plan.tile <= 128 and (plan.tile % 16 == 0 if block_size > plan.tile else plan.tile % block_size == 0)
    assert plan.key_reads == 1
    assert plan == plan_decode(B, next_n, H, D, block_size, max_model_len, t)  # a function of shapes alone


@settings(deadline=None, derandomize=True, max_examples=100)
@given(st.integers(1, 512), st.integers(1, 100000), st.data())
def test_an_explicit_split_kv_is_honoured_exactly(B, mml, data):
    split = data.draw(st.integers(1, 4096))
    plan = plan_decode(B, 2, 64, 128, 64, mml, TARGETS["sm_90a"], split_kv=split)
    assert plan.split_kv == split and plan.grid == (B * split, 1, 1)


@pytest.mark.parametrize("kw,match", [
    (dict(split_kv=0), r"split_kv: expected an int in \[1, "),
    (dict(split_kv=1 << 30), r"split_kv: expected an int in \[1, "),
    (dict(split_kv=True), "split_kv"),
    (dict(accumulation="fp16"), "accumulation: expected one of"),
    (dict(kernel="mqa_logits_generic"), "kernel: 'mqa_logits_generic' is not a decode kernel"),
])
def test_forced_values_that_cannot_work_are_named(kw, match):
    with pytest.raises(ValueError, match=match):
        plan_decode(4, 2, 64, 128, 64, 4096, TARGETS["sm_90a"], **kw)


@pytest.mark.parametrize("args,match", [
    ((4, 9, 64, 128, 64, 100), "next_n: expected 1..8"),
    ((4, 2, 64, 120, 64, 100), "D must be a multiple of 16"),
    ((4, 2, 64, 2048, 64, 100), "past the generic decode kernel's 1024"),
    ((0, 2, 64, 128, 64, 100), "B: expected an int >= 1"),
    ((4, 2, 64, 128, 0, 100), "block_size: expected an int >= 1"),
])
def test_shapes_no_kernel_serves_are_named(args, match):
    with pytest.raises(ValueError, match=match):
        plan_decode(*args, TARGETS["gfx950"])


@pytest.fixture
def fast_path(monkeypatch):
    """A pretend fp8 tensor-core decode kernel for H = 64, D = 128, block_size 64 on sm_90a: its launch facts in
    the catalog, its planning facts in a spec."""
    monkeypatch.setitem(catalog.KERNEL, "pretend_decode", catalog.Kernel(
        "pretend_decode", "sm90a/pretend.hip", "hx_pretend", "DecodeParams", block=256, targets=("sm_90a",),
        variants=({"HX_HEADS": 64},), accumulation="fp8_tc", fits=((64, 128),), block_sizes=(64,)))
    spec = DecodeKernelSpec("pretend_decode")
    monkeypatch.setattr(decode_plan, "DECODE", KernelMenu("decode", GENERIC_DECODE))
    decode_plan._plan_decode.cache_clear()
    register_decode("sm_90a", spec)
    yield spec
    decode_plan._plan_decode.cache_clear()


def test_a_registered_fast_path_is_taken_where_it_serves(fast_path):
    t = TARGETS["sm_90a"]
    assert plan_decode(8, 2, 64, 128, 64, 4096, t).kernel == fast_path.key
    assert plan_decode(8, 2, 64, 128, 16, 4096, t).kernel == GENERIC_DECODE.key      # block size it lacks
    assert plan_decode(8, 2, 32, 128, 64, 4096, t).kernel == GENERIC_DECODE.key      # heads it lacks
    assert plan_decode(8, 2, 64, 128, 64, 4096, TARGETS["gfx950"]).kernel != fast_path.key


def test_accumulation_fp32_keeps_tensor_core_kernels_out(fast_path):
    t = TARGETS["sm_90a"]
    assert fast_path.accumulation == "fp8_tc"
    plan = plan_decode(8, 2, 64, 128, 64, 4096, t, accumulation="fp32")
    assert plan.kernel == GENERIC_DECODE.key and plan.accumulation == "fp32" and plan.eps == 2.0 ** -20
    with pytest.raises(ValueError, match="accumulation='fp32' takes fp32-class kernels only"):
        plan_decode(8, 2, 64, 128, 64, 4096, t, accumulation="fp32", kernel=fast_path.key)
    with pytest.raises(ValueError, match="does not serve H=32"):
        plan_decode(8, 2, 32, 128, 64, 4096, t, kernel=fast_path.key)


def test_the_generic_tile_matches_the_kernels_arithmetic():
    # hsaco_src/generic/paged_mqa_logits.hip: hx_tiling, for the D values it serves.
    for D in range(16, 1025, 16):
        krow16 = D // 16 + 1
        kt = min(128, (128 * 144) // (16 * krow16))
        kt -= kt % 16
        for bs in (1, 3, 16, 64, 100, 128, 4096):
            want = (kt // bs) * bs if bs <= kt else kt
            assert GENERIC_DECODE.tile_keys(bs, D) == want, (D, bs)
    assert dataclasses.replace(GENERIC_DECODE).tile_keys(64, 128) == 128
