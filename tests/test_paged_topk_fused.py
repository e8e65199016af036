"""The fused decode top-k (sm_90a: hsaco_src/sm90a/paged_mqa_topk_wgmma_tma.hip, gfx950:
hsaco_src/gfx950/paged_mqa_topk_mfma.hip, then generic/paged_topk_merge.hip).

The cases of tests/emu/paged_topk_fused_cases.py (small inputs, a few units, the least candidate buffers: the gate
and the composed path's bits, key orders, untrusted values, the same bits at any grid) on the emulated MI355X and,
marked gpu, on a real GPU; the gfx950 kernel's ISA against the logits kernel's. At full size on a real GPU (marked
gpu, skipped without one): the top-k gate on rows of every kind in both forms of the lengths, both layouts, both
block sizes and both head counts, exactly the composed path's selection; key orders that make every key enter the
candidates of the default grid's units (rising), none after the first (falling) and every logit tie; the same
bits twice. Over a backend that runs no kernel (sm_90a and gfx950): which workspace and which launches a call gets,
what it refuses, and a prepared call that allocates nothing."""
import numpy as np
import pytest

import emu_harness as EH
import hipindexer
import paged_topk_cases as C
import paged_topk_fused_cases as F
from hipindexer import reference, testing
from hipindexer.ops import paged_topk_fused
from hipindexer.runtime import DeviceArray

D = 128


@pytest.mark.toolchain
@pytest.mark.mutation("paged_topk_fused_mfma")
def test_fused_cases_pass_on_the_emulator_and_every_gfx950_fused_plant_fails_them(emu_kernels):
    EH.assert_cases_pass_and_every_plant_fails_them("paged_topk_fused_mfma", len(F.CASES))


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(F.CASES))
def test_fused_cases_on_the_gpu(gpu_device, name):
    F.CASES[name](gpu_device)


@pytest.mark.toolchain
def test_the_gfx950_fused_kernel_keeps_the_logits_kernels_budget(emu_kernels):
    """The ISA report of paged_mqa_topk_mfma against paged_mqa_logits_mfma's, at both head counts: no scratch
    (spills), as many waves resident a SIMD, as many key bytes in flight, and VALU cycles a 64-key page with 1 or 2
    live rows (the page's own work and each row's, the cut's rare branch left out) within 1.25x."""
    from tools.support import isa_report
    rep = {r.source: r for r in isa_report.manifest_reports(emu_kernels / "manifest.json",
                                                             names=("paged_mqa_logits_mfma", "paged_mqa_topk_mfma"))}
    for heads in (32, 64):
        logits, fused = rep[f"paged_mqa_logits_mfma.HX_HEADS-{heads}"], rep[f"paged_mqa_topk_mfma.HX_HEADS-{heads}"]
        f, g = fused.decode, logits.decode
        assert fused.resources["scratch"] == 0 and f is not None, fused.resources
        assert f.waves_per_simd_resident == g.waves_per_simd_resident >= 2, (f, g)
        assert f.inflight_bytes_per_wave >= g.inflight_bytes_per_wave and f.key_bytes_per_page == 64 * 128, (f, g)
        assert f.rows == 2 and f.rare_valu_cycles > 0, f  # the cut is in the loop, marked rare
        for n in (1, 2):
            assert f.page_valu_with(n) <= 1.25 * g.page_valu_with(n), (heads, n, f.page_valu_with(n),
                                                                       g.page_valu_with(n))


def fused_inputs(seed, **kw):
    """F.fused_inputs at full size: wide rows of 20,000 keys, top_k 2048 unless given."""
    return F.fused_inputs(seed, **({"ctx": 20000, "top_k": 2048} | kw))


def fused_workspace(dev, inp, top_k):
    B, next_n, H, _ = inp.q.shape
    ws = hipindexer.paged_topk_workspace(B, next_n, top_k, inp.max_model_len, inp.kv_cache.shape[1], device=dev,
                                         heads=H, head_dim=D, fused=True)
    assert ws.fused and ws.nbytes <= ws.bound, ws
    return ws


@pytest.mark.gpu
@pytest.mark.parametrize("H,bs,preshuffle,next_n,rows,ragged,top_k,sorted", [
    (64, 64, False, 1, False, False, 2048, False),
    (64, 64, False, 2, False, True, 2048, True),
    (64, 16, True, 2, True, True, 512, False),
    (32, 64, True, 1, True, False, 1024, True),
    (32, 16, False, 2, False, False, 2048, False),
    (64, 64, True, 1, False, False, 7, False),
    (64, 16, False, 2, True, False, 300, True),
])
def test_the_fused_top_k_passes_the_gate_and_selects_as_the_composed_path(gpu_device, H, bs, preshuffle, next_n,
                                                                          rows, ragged, top_k, sorted):
    inp = fused_inputs(H + bs + next_n + top_k, next_n=next_n, H=H, bs=bs, preshuffle=preshuffle, rows=rows,
                       ragged=ragged, top_k=top_k)
    errors = DeviceArray.from_numpy(np.zeros(1, np.int32), gpu_device)
    got = C.check(gpu_device, inp, top_k, sorted, workspace=fused_workspace(gpu_device, inp, top_k), errors=errors)
    assert int(errors.numpy()[0]) == 0
    count = (got[0] >= 0).sum(axis=1)
    assert (count == top_k).any() and (count == 0).any() and ((count > 0) & (count < top_k)).any(), count
    composed = C.run(gpu_device, inp, top_k, sorted, fused=False)
    for a, b in zip(got, composed):  # the same kernel's logits: the same selection, bit for bit
        assert (a.view(np.uint32) == b.view(np.uint32)).all()


@pytest.mark.gpu
@pytest.mark.parametrize("next_n", [1, 2])
@pytest.mark.parametrize("order", ["rising", "falling", "tied"])
def test_key_orders_that_fill_and_starve_the_on_chip_candidates(gpu_device, order, next_n):
    top_k = 2048
    inp = F.ordered_inputs(order, next_n, B=16, ctx=65536)  # a unit's piece of a row: 7,900 keys
    ws = fused_workspace(gpu_device, inp, top_k)
    bound = reference.decode_bounds(inp.context_lens, next_n, inp.max_model_len, None)
    first = np.maximum(bound - top_k, 0) if order == "rising" else np.zeros_like(bound)
    want = first[:, None] + np.arange(top_k)[None, :]
    for sorted in (False, True):  # exact expectations: no reference logits needed
        idx, val, slots = C.run(gpu_device, inp, top_k, sorted, workspace=ws)
        expect = want[:, ::-1] if sorted and order == "rising" else want
        assert (idx == expect).all(), f"{order}, sorted {sorted}"
        assert (val > 0).all() and (slots >= 0).all()
        if order == "tied":
            assert (val == val[:, :1]).all()


# ------------------------------------------------------------------ the host side, over a backend that runs no kernel

def _resident(dev, inp):
    return testing.DecodeInputs(*[DeviceArray.from_numpy(a, dev) if isinstance(a, np.ndarray) else a
                                  for a in inp.args()])


def test_which_workspace_and_launches_a_call_gets(hopper):
    hb, dev = hopper
    inp = _resident(dev, fused_inputs(1, B=9, next_n=2, ctx=3000, top_k=256))
    for B, n, k, bs, H in ((64, 1, 2048, 64, 64), (256, 2, 2048, 16, 32), (1, 1, 7, 64, 64), (2048, 1, 64, 64, 64)):
        ws = hipindexer.paged_topk_workspace(B, n, k, 1 << 17, bs, device=dev, heads=H, whole=False)
        assert ws.fused and ws.units == 132 and ws.nbytes <= ws.bound, ws
        assert ws.nbytes == paged_topk_fused.fused_workspace_bytes(B, n, k, 132)
    # thousands of sequences at a tiny top_k: the per-sequence lists would pass the bound, so the composed path
    big = hipindexer.paged_topk_workspace(4096, 1, 16, 1 << 17, 64, device=dev, heads=64)
    assert not big.fused and big.nbytes <= big.bound
    assert paged_topk_fused.fused_workspace_bytes(4096, 1, 16, 132) > big.bound
    with pytest.raises(ValueError, match="^fused: True, but the fused kernel needs a workspace past the bound"):
        hipindexer.paged_topk_workspace(4096, 1, 16, 1 << 17, 64, device=dev, heads=64, fused=True)
    for kw in (dict(heads=16, head_dim=64), dict(heads=64, top_k=4096), dict(heads=64, next_n=3), dict(),
               dict(heads=64), dict(heads=64, B=64, max_model_len=1 << 17, fused=False)):
        args = dict(B=9, next_n=2, top_k=256, max_model_len=3000, block_size=64, device=dev) | kw
        assert not hipindexer.paged_topk_workspace(**args).fused, kw  # the fused kernel cannot serve, or not pay
    assert hipindexer.paged_topk_workspace(9, 2, 256, 3000, 64, device=dev, heads=64, fused=True).fused
    # every batch whose logits fit the bound takes the whole-row path; past it, long rows take the fused path
    # however few (its merge in two levels); with whole=False, a few sequences' rows of two top_k or more the fused
    # path, shorter ones and many sequences' short rows (thin pieces) the composed path
    def path(ws):
        return "whole" if ws.whole else "fused" if ws.fused else "composed"
    assert [path(hipindexer.paged_topk_workspace(B, 1, 2048, L, 64, device=dev, heads=64))
            for B, L in ((1, 131072), (8, 65536), (16, 32768), (4, 8192), (8, 4096),
                         (64, 16384), (9, 8192), (8, 4095), (16, 131072), (64, 32768))] == \
        ["whole"] * 8 + ["fused"] * 2
    assert [path(hipindexer.paged_topk_workspace(B, 1, 2048, L, 64, device=dev, heads=64, whole=False))
            for B, L in ((1, 131072), (8, 65536), (16, 32768), (4, 8192), (8, 4096), (9, 8192), (8, 4095),
                         (64, 16384))] == ["fused"] * 5 + ["composed"] * 3
    n0 = len(hb.launches)
    hipindexer.fp8_paged_mqa_topk(*inp.args()[:6], 256)  # short rows held resident: the whole-row path
    assert [fn for fn, *_ in hb.launches[n0:]] == ["hx_paged_mqa_logits_wgmma_tma", "hx_topk_resident"]
    n0 = len(hb.launches)
    hipindexer.fp8_paged_mqa_topk(*inp.args()[:6], 256, whole=False)  # thin pieces (fused_pays): the composed path
    assert "hx_paged_topk_step" in [fn for fn, *_ in hb.launches[n0:]]
    n0 = len(hb.launches)
    hipindexer.fp8_paged_mqa_topk(*inp.args()[:6], 256, return_values=True, return_slots=True, fused=True)
    assert [fn for fn, *_ in hb.launches[n0:]] == ["hx_paged_mqa_topk_wgmma_tma", "hx_paged_topk_merge"]
    sel = hipindexer.catalog.STRUCT["DecodeTopkParams"].ctype().from_buffer_copy(hb.launches[n0][4])
    assert (sel.top_k, sel.next_n, sel.out, sel.clean) == (256, 2, 0, 0)
    assert bytes(sel.kv_map) == inp.kv_cache.ptr.to_bytes(8, "little") * 16  # the cache's map, by value
    merge = hipindexer.catalog.STRUCT["PagedTopkMergeParams"].ctype().from_buffer_copy(hb.launches[n0 + 1][4])
    assert hb.launches[n0 + 1][2][0] == hipindexer.catalog.KERNEL["paged_topk_merge"].block_for("sm_90a") == 1024
    assert merge.parts == sel.parts and merge.seq_nparts == sel.seq_nparts and merge.units == hb.launches[n0][1][0]
    assert merge.values != 0 and merge.slots != 0
    n1 = len(hb.launches)
    hipindexer.fp8_paged_mqa_topk(*inp.args()[:6], 256, fused=False)
    assert "hx_paged_topk_step" in [fn for fn, *_ in hb.launches[n1:]]


@pytest.mark.parametrize("merge_overlaps", [False, True])
def test_on_a_device_that_overlaps_launches_the_select_overlaps_and_the_merge_as_the_op_says(monkeypatch,
                                                                                              merge_overlaps):
    from host_backend import OverlappingHostBackend, registered
    monkeypatch.setattr(paged_topk_fused, "MERGE_OVERLAPS", merge_overlaps)
    hb = OverlappingHostBackend(name=f"host_overlap_fused_{int(merge_overlaps)}")
    with registered(hb) as dev:
        inp = _resident(dev, fused_inputs(8, B=4, next_n=2, ctx=3000, top_k=256))
        hipindexer.fp8_paged_mqa_topk(*inp.args()[:6], 256, fused=True, units=40, merge_group=4)
    merges = ["hx_paged_topk_merge"] * 2  # both levels
    assert [fn for fn, *_ in hb.launches[-3:]] == ["hx_paged_mqa_topk_wgmma_tma"] + merges
    assert hb.overlapped == ["hx_paged_mqa_topk_wgmma_tma"] + (merges if merge_overlaps else [])


def test_few_sequences_over_many_units_merge_in_two_levels(hopper):
    hb, dev = hopper
    inp = _resident(dev, fused_inputs(8, B=4, next_n=2, ctx=3000, top_k=256))  # 24576 // 256 = 96 pieces a group
    assert paged_topk_fused.merge_group("sm_90a", 4, 256, 132) == 0
    assert paged_topk_fused.merge_group("sm_90a", 1, 2048, 132) == 12
    for kw, levels in ((dict(), [0]), (dict(merge_group=4), [4, 0]), (dict(merge_group=0), [0])):
        n0 = len(hb.launches)
        hipindexer.fp8_paged_mqa_topk(*inp.args()[:6], 256, fused=True, units=40, **kw)
        launches = hb.launches[n0:]
        assert [fn for fn, *_ in launches] == ["hx_paged_mqa_topk_wgmma_tma"] + ["hx_paged_topk_merge"] * len(levels)
        merges = [hipindexer.catalog.STRUCT["PagedTopkMergeParams"].ctype().from_buffer_copy(m[4])
                  for m in launches[1:]]
        assert [m.group for m in merges] == levels, kw
        if len(levels) == 2:  # groups of 4 of the 40 units' pieces, 8 rows: 10 blocks a row, then every 4th entry
            assert merges[0].groups == 10 and launches[1][1][0] == 8 * 10 and merges[1].stride == 4
        assert merges[-1].stride == (levels[0] or 1)
    n0 = len(hb.launches)
    for bad in (1, 97, -1, True, 2.0):
        with pytest.raises(ValueError, match=r"^merge_group: expected None, 0 or an int in \[2, 96\]"):
            hipindexer.fp8_paged_mqa_topk(*inp.args()[:6], 256, fused=True, merge_group=bad)
    assert len(hb.launches) == n0


@pytest.fixture
def mi355x():
    """(backend, device): a gfx950 device of 256 CUs over host memory (tests/host_backend.py)."""
    from hipindexer.runtime.module import load_manifest
    from host_backend import HostBackend, registered
    try:
        load_manifest()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    hb = HostBackend(name="host_fused_gfx950", arch="gfx950", num_cus=256, wave_size=64)
    with registered(hb) as dev:
        yield hb, dev


def test_gfx950_takes_its_own_fused_kernel_with_two_units_a_cu(mi355x):
    hb, dev = mi355x
    inp = _resident(dev, fused_inputs(6, B=4, next_n=2, ctx=3000, top_k=256, bs=16))
    for B, n, k, bs, H in ((64, 1, 2048, 64, 64), (256, 2, 2048, 16, 32), (64, 2, 512, 128, 64)):
        ws = hipindexer.paged_topk_workspace(B, n, k, 1 << 17, bs, device=dev, heads=H, whole=False)
        assert ws.fused and ws.units == 512 and ws.nbytes <= ws.bound, ws
    n0 = len(hb.launches)
    hipindexer.fp8_paged_mqa_topk(*inp.args()[:6], 256, return_values=True, fused=True, cap=256 + 512)
    launches = hb.launches[n0:]
    assert [fn for fn, *_ in launches] == ["hx_paged_mqa_topk_mfma", "hx_paged_topk_merge"]
    assert launches[0][1][0] <= 512 and launches[0][2][0] == 256
    sel = hipindexer.catalog.STRUCT["DecodeTopkParams"].ctype().from_buffer_copy(launches[0][4])
    assert (sel.top_k, sel.next_n, bytes(sel.kv_map), sel.cap, sel.block_size) == (256, 2, bytes(128), 768, 16)
    n0 = len(hb.launches)
    for kw, name in ((dict(stages=6), "stages"), (dict(cap=767), "cap"), (dict(cap=True), "cap")):
        with pytest.raises(ValueError, match=f"^{name}"):
            hipindexer.fp8_paged_mqa_topk(*inp.args()[:6], 256, fused=True, **kw)
    with pytest.raises(ValueError, match="^fused: True, but the fused kernel is the unit of paged_mqa_logits_mfma"):
        bs1 = _resident(dev, fused_inputs(7, B=4, next_n=1, ctx=300, top_k=64, bs=1))
        hipindexer.fp8_paged_mqa_topk(*bs1.args()[:6], 64, fused=True)
    assert len(hb.launches) == n0


def test_a_fused_workspace_refuses_what_it_cannot_serve(hopper):
    hb, dev = hopper
    inp = _resident(dev, fused_inputs(2, B=4, next_n=2, ctx=3000, top_k=256))
    ws = hipindexer.paged_topk_workspace(4, 2, 256, 3000, 64, device=dev, heads=64, fused=True)
    composed = hipindexer.paged_topk_workspace(4, 2, 256, 3000, 64, device=dev, whole=False)
    for kw in (dict(heads=16, head_dim=64), dict(heads=64, chunk=64), dict(), dict(heads=64, next_n=3)):
        with pytest.raises(ValueError, match="^fused: True, but"):
            hipindexer.paged_topk_workspace(**(dict(B=4, next_n=2, top_k=256, max_model_len=3000, block_size=64,
                                                    device=dev, fused=True) | kw))
    n0 = len(hb.launches)
    for kw, name in ((dict(workspace=ws, accumulation="fp32"), "workspace"), (dict(workspace=ws, fused=False),
                                                                             "workspace"),
                     (dict(workspace=ws, chunk=64), "workspace"), (dict(workspace=ws, split_kv=2), "workspace"),
                     (dict(workspace=composed, fused=True), "fused"), (dict(fused=True, accumulation="fp32"),
                                                                       "fused"),
                     (dict(fused="yes"), "fused")):
        with pytest.raises(ValueError, match=f"^{name}"):
            hipindexer.fp8_paged_mqa_topk(*inp.args()[:6], 256, **kw)
    small = _resident(dev, fused_inputs(3, B=4, next_n=2, ctx=3000, H=16, top_k=256))
    with pytest.raises(ValueError, match="^fused: True, but the fused kernel is the unit of"):
        hipindexer.fp8_paged_mqa_topk(*small.args()[:6], 256, fused=True)
    assert len(hb.launches) == n0


def test_a_prepared_fused_call_allocates_and_copies_nothing(hopper, monkeypatch):
    hb, dev = hopper
    inp = _resident(dev, fused_inputs(4, B=4, next_n=2, ctx=3000, top_k=256))
    ws = hipindexer.paged_topk_workspace(4, 2, 256, 3000, 64, device=dev, heads=64, fused=True)
    outs = tuple(DeviceArray.empty((8, 256), dt, dev) for dt in (np.int32, np.float32, np.int32))
    kw = dict(workspace=ws, out=outs, return_values=True, return_slots=True)
    hipindexer.fp8_paged_mqa_topk(*inp.args()[:6], 256, **kw)
    mallocs = []
    real = hb.malloc
    monkeypatch.setattr(hb, "malloc", lambda n, s: mallocs.append(n) or real(n, s))
    copies, n0 = hb.htod, len(hb.launches)
    for _ in range(3):
        assert hipindexer.fp8_paged_mqa_topk(*inp.args()[:6], 256, **kw) == outs
    assert not mallocs and hb.htod == copies and len(hb.launches) == n0 + 6
    assert paged_topk_fused.FUSED_MAX_TOP_K == 2048 and paged_topk_fused.FUSED_MAX_NEXT_N == 2
