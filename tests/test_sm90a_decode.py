"""The sm_90a tensor-core decode kernel (paged_mqa_logits_wgmma_tma, keys by the tensor copy engine): planner
choice, catalog entry, build resources and the SASS of its objects where a cuobjdump is at hand (CPU only).

Its correctness proof is the device sweep (`hipindexer check decode --device cuda:0 --kernel
paged_mqa_logits_wgmma_tma`, tools/device/h200_sm90a_decode.sh); here only what a machine without a GPU can check.
"""
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from hipindexer import catalog
from hipindexer.check import sweep
from hipindexer.cli import _decode_filters
from hipindexer.plan.decode import GENERIC_DECODE, WGMMA_TMA_DECODE_SM90, plan_decode
from hipindexer.plan import TARGETS
from hipindexer.runtime.module import DEFAULT_MANIFEST

H200, MI355X = TARGETS["sm_90a"], TARGETS["gfx950"]
TMA = WGMMA_TMA_DECODE_SM90.key
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("H", [32, 64])
@pytest.mark.parametrize("block_size", [16, 64])
@pytest.mark.parametrize("preshuffle", [False, True])
def test_sm90a_takes_the_tensor_copy_wgmma_kernel_where_it_serves(H, block_size, preshuffle):
    for next_n in range(1, 9):
        p = plan_decode(16, next_n, H, 128, block_size, 32768, H200, preshuffle=preshuffle)
        assert p.kernel == TMA and p.variant == {"HX_HEADS": H} and p.block == 512
        assert p.accumulation == "fp8_tc" and p.eps == 2.0 ** -12
        assert p.tile == 64 and p.head_pass == 128 and p.key_reads == 1


@pytest.mark.parametrize("H,D,block_size", [(16, 128, 64), (128, 128, 64), (64, 64, 64), (32, 256, 16),
                                            (64, 128, 1), (64, 128, 32), (32, 128, 128)])
def test_everything_else_on_sm90a_stays_generic(H, D, block_size):
    assert plan_decode(4, 2, H, D, block_size, 4096, H200).kernel == GENERIC_DECODE.key


@pytest.mark.parametrize("H", [32, 64])
def test_fp32_and_gfx950_never_get_the_wgmma_kernel(H):
    p = plan_decode(4, 2, H, 128, 64, 4096, H200, accumulation="fp32")
    assert p.kernel == GENERIC_DECODE.key and p.accumulation == "fp32"
    assert plan_decode(4, 2, H, 128, 64, 4096, MI355X).kernel == "paged_mqa_logits_mfma"
    with pytest.raises(ValueError, match="accumulation='fp32' takes fp32-class kernels only"):
        plan_decode(4, 2, H, 128, 64, 4096, H200, accumulation="fp32", kernel=TMA)
    with pytest.raises(ValueError, match="is not a decode kernel for gfx950"):
        plan_decode(4, 2, H, 128, 64, 4096, MI355X, kernel=TMA)


def test_a_forced_wgmma_kernel_refuses_shapes_it_does_not_serve():
    with pytest.raises(ValueError, match="does not serve H=16, D=128, block_size=64"):
        plan_decode(4, 2, 16, 128, 64, 4096, H200, kernel=TMA)
    with pytest.raises(ValueError, match="does not serve H=64, D=128, block_size=32"):
        plan_decode(4, 2, 64, 128, 32, 4096, H200, kernel=TMA)


@pytest.mark.parametrize("B,mml", [(1, 1), (1, 100), (1, 131072), (4, 8192), (16, 32768), (64, 131072),
                                   (200, 4096), (4096, 65536)])
def test_the_default_grid_is_one_unit_per_sm_or_per_stage(B, mml):
    p = plan_decode(B, 1, 64, 128, 64, mml, H200)
    stages = -(-mml // 64)
    assert p.grid == (p.units, 1, 1) and p.units == min(H200.num_cus, B * stages)
    assert p.split_kv == -(-p.units // B)


def test_an_explicit_split_kv_gives_b_times_split_units():
    p = plan_decode(64, 2, 32, 128, 16, 32768, H200, split_kv=7)
    assert p.kernel == TMA and p.units == 448 and p.grid == (448, 1, 1)


def test_the_kernel_deals_only_when_asked_and_takes_the_callers_deal():
    p = plan_decode(64, 1, 64, 128, 64, 131072, H200)
    assert (p.deal_share, p.deal_grain) == (0, 0)
    assert (plan_decode(64, 1, 64, 128, 64, 131072, H200, deal_share=96).deal_grain,
            plan_decode(64, 1, 64, 128, 64, 131072, H200, deal_share=0, deal_grain=5).deal_share,
            plan_decode(64, 1, 64, 128, 64, 131072, H200, deal_share=1024, deal_grain=1).deal_grain) == (256, 0, 1)
    assert plan_decode(64, 1, 64, 128, 16, 131072, H200, deal_share=64).deal_grain == 1024  # as many keys at 16
    assert plan_decode(4, 1, 16, 128, 64, 4096, H200).deal_share == 0  # the generic kernel deals nothing
    with pytest.raises(ValueError, match="paged_mqa_logits_generic does not deal"):
        plan_decode(4, 1, 16, 128, 64, 4096, H200, deal_share=64)
    for bad in (dict(deal_share=1025), dict(deal_share=-1), dict(deal_share=True), dict(deal_share=8, deal_grain=0),
                dict(deal_grain=2.0)):
        with pytest.raises(ValueError, match="deal_"):
            plan_decode(64, 1, 64, 128, 64, 131072, H200, **bad)


def test_each_stream_gets_a_claim_pair_of_its_own_until_they_run_out(hopper):
    """The kernel's claim pairs (hipindexer/ops/claims.py): one per stream of a launch that deals, the same one call
    after call, 8 bytes apart inside the code object's table; past the table's pairs a stream gets 0, which deals
    nothing; a launch that deals nothing gets 0 and takes no pair."""
    from hipindexer import fp8_paged_mqa_logits, testing
    from hipindexer.ops import claims
    from hipindexer.ops.launch import kernel_for
    from hipindexer.runtime import DeviceArray, Stream
    hb, dev = hopper
    case = testing.DecodeCase(4, 1, 64, 128, 64, False, mean_context=300, spread="equal")
    inp = testing.decode_inputs(np.random.default_rng(0), case)
    args = [DeviceArray.from_numpy(a, dev) if isinstance(a, np.ndarray) else a for a in inp.args()]
    struct = catalog.STRUCT["DecodeTmaParams"]

    def sent(stream, deal_share=64):
        fp8_paged_mqa_logits(*args, stream=stream, deal_share=deal_share)
        return struct.ctype().from_buffer_copy(hb.launches[-1][4])
    kern = kernel_for(dev, TMA, {"HX_HEADS": 64})
    table, (base, _) = claims.claim_pairs(kern), kern.global_address(claims.SYMBOL)
    quiet = Stream(dev, external=0x7000)
    undealt = sent(quiet, deal_share=0)
    assert undealt.claims == 0 and (undealt.deal_share, undealt.deal_grain) == (0, 0)
    assert quiet.handle not in table._of  # a launch that deals nothing takes no pair
    first = sent(None)
    assert first.claims != 0 and first.deal_share == 64
    assert sent(None).claims == first.claims
    streams = [Stream(dev, external=0x1000 + i) for i in range(3)]
    pairs = [sent(s).claims for s in streams]
    assert len({first.claims, *pairs}) == 4 and all((a - first.claims) % 8 == 0 for a in pairs)
    assert all(base <= a < base + 8 * claims.PAIRS for a in (first.claims, *pairs))
    while table._given < claims.PAIRS:
        table(0x9000 + table._given)
    assert sent(Stream(dev, external=0x8000)).claims == 0
    assert sent(streams[1]).claims == pairs[1]


def test_a_prepared_launch_sends_its_pointers_and_the_tensor_map_by_value_per_call(hopper):
    """The tensor-copy kernel takes the cache's map in its parameters: a prepared launch packs the per-call pointers
    and the map's 128 bytes with one pack, leaving the fixed fields as prepared; a layout where that pack would
    zero a fixed field, or a blob before a pointer, is refused."""
    from hipindexer.ops.decode import DECODE_DEAL_POINTERS, DECODE_POINTERS
    from hipindexer.ops.launch import kernel_for
    hb, dev = hopper
    kern = kernel_for(dev, TMA, {"HX_HEADS": 64})
    launch = kern.prepare((3, 1, 1), pointers=DECODE_DEAL_POINTERS, B=5, max_model_len=77, deal_share=9)
    struct = catalog.STRUCT["DecodeTmaParams"]
    maps = [bytes(range(128)), bytes(range(255, 127, -1))]
    for m in maps:
        launch(0, *range(1, 10), m)
        p = struct.ctype().from_buffer_copy(hb.launches[-1][4])
        assert [getattr(p, f) for f in DECODE_DEAL_POINTERS[:-1]] == list(range(1, 10))
        assert bytes(p.kv_map) == m and (p.B, p.max_model_len, p.deal_share) == (5, 77, 9)
    launch(0, *range(1, 10), b"")
    assert bytes(struct.ctype().from_buffer_copy(hb.launches[-1][4]).kv_map) == bytes(128)
    for bad in (DECODE_POINTERS + ("kv_map",), DECODE_POINTERS + ("kv_map", "claims"), ("kv_cache",)):
        with pytest.raises(ValueError, match="must be the struct's first fields"):
            kern.prepare((3, 1, 1), pointers=bad)


def test_catalog_declares_the_kernel_for_sm90a_only():
    k = catalog.KERNEL[TMA]
    assert k.targets == ("sm_90a",) and k.params == "DecodeTmaParams" and k.block == WGMMA_TMA_DECODE_SM90.block == 512
    assert (k.source, k.symbol) == ("sm90a/paged_mqa_logits_wgmma_tma.hip", "hx_paged_mqa_logits_wgmma_tma")
    assert sorted(v["HX_HEADS"] for v in k.variants) == [32, 64]
    assert k.accumulation == "fp8_tc" and 200 << 10 < k.smem <= 227 << 10  # the H200's opt-in limit per block


def test_check_decode_restricts_a_forced_kernel_to_its_shapes():
    assert _decode_filters(TMA, None, None, None) == ((32, 64), (128,), (16, 64))
    assert _decode_filters(TMA, (64,), None, (16,)) == ((64,), (128,), (16,))
    assert _decode_filters(None, None, None, None) == (None, None, None)
    assert _decode_filters(GENERIC_DECODE.key, (16,), None, None) == ((16,), None, None)
    d = sweep.decode_design(False, 0, 12, 8192, (32, 64), (128,), (16, 64))
    assert d.cases and all(c["H"] in (32, 64) and c["D"] == 128 and c["block_size"] in (16, 64) for c in d.cases)
    assert {c["preshuffle"] for c in d.cases} == {False, True}


def test_fixed_shape_checks_stay_within_the_filters():
    assert sweep.decode_shape(16, 64, 16, (32, 64), (128,), (16, 64)) == (32, 128, 16)
    assert sweep.decode_shape(32, 128, 64, None, None, (16, 64), need16=True) == (32, 128, 64)
    assert sweep.decode_shape(32, 128, 64, None, None, (1,), need16=True) is None
    o = sweep.decode_offset_case(None, None, 1, 1 << 25, block_sizes=(16, 64))
    assert o.status == sweep.NA


def _entries(name=TMA):
    if not DEFAULT_MANIFEST.is_file():
        pytest.skip("no built kernels")
    entries = [e for e in json.loads(DEFAULT_MANIFEST.read_text())["kernels"]
               if e["target"] == "sm_90a" and e["name"] == name]
    if not entries:
        pytest.skip("the manifest has no sm_90a build")
    return entries


def test_built_objects_do_not_spill_and_carry_their_shared_memory():
    entries = _entries(TMA)
    assert {e["variant_key"] for e in entries} == {f"{TMA}.HX_HEADS-32", f"{TMA}.HX_HEADS-64"}
    for e in entries:
        r = e["resources"]
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack"] == 0, e["variant_key"]
        assert r["registers"] <= 128, e["variant_key"]  # 512 threads: the launch allocation's share
        assert e["dynamic_smem"] == catalog.KERNEL[TMA].smem and e["block"] == 512



def test_the_generic_decode_kernel_builds_without_spills_on_sm90a():
    # Its walk state lives in shared memory and its pass loop takes pairs two at a time so that ptxas, aiming
    # at 128-thread occupancy, has no reason to spill around the key loops (hsaco_src/generic/paged_mqa_logits.hip).
    (e,) = _entries("paged_mqa_logits_generic")
    r = e["resources"]
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack"] == 0, r
    assert e["block"] == 128

def _cuobjdump():
    for cand in (os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump"):
        if cand and Path(cand).is_file():
            return cand
    return None


def test_the_sass_holds_the_mmas_of_every_pass_width_and_no_local_memory():
    entries = _entries(TMA)
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("no cuobjdump (set CUOBJDUMP)")
    from tools.support import sass_mix as mix
    for e in entries:
        H = e["variant"]["HX_HEADS"]
        sass = subprocess.run([tool, "-sass", str(DEFAULT_MANIFEST.parent / e["object"])], capture_output=True,
                              text=True, check=True).stdout
        (fn,) = mix.parse(sass).values()
        m = mix.mix(fn)
        assert m["kernel_local_memory"] == 0, e["variant_key"]
        widths = {int(s.split("x")[1]) for s in m["mma_shapes"]}
        assert widths == {r * H for r in range(1, 128 // H + 1)}, (e["variant_key"], m["mma_shapes"])
        # four k32 steps of D = 128 per pass width, each width twice: in segments of one pass (their weights held
        # in registers) and in longer ones
        assert m["kernel_qgmma"] == 4 * len(widths) * 2


def test_the_tensor_copy_kernel_is_the_one_sm90a_tensor_core_decode_kernel():
    for H in (32, 64):
        p = plan_decode(16, 1, H, 128, 64, 32768, H200, kernel=TMA)
        assert p.kernel == TMA and p.variant == {"HX_HEADS": H} and p.block == 512
    assert catalog.KERNEL[TMA].params == "DecodeTmaParams" and WGMMA_TMA_DECODE_SM90.kv_map
    with pytest.raises(ValueError, match="is not a decode kernel for sm_90a"):
        plan_decode(16, 1, 64, 128, 64, 32768, H200, kernel="paged_mqa_logits_wgmma")
