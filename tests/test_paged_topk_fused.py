"""The fused decode top-k (sm_90a: hsaco_src/sm90a/paged_mqa_topk_wgmma_tma.hip, gfx950:
hsaco_src/gfx950/paged_mqa_topk_mfma.hip, then generic/paged_topk_merge.hip).

The cases of tests/emu/paged_topk_fused_cases.py (small inputs, a few units, the least candidate buffers) on the
emulated MI355X and, marked gpu, on a real GPU. Then, at full size on a real GPU (marked gpu, skipped without one): the top-k gate on rows of every kind in both forms of the lengths,
both layouts, both block sizes and both head counts, exactly the composed path's selection (the same logits); key
orders that make every key enter the on-chip candidates (rising), none after the first (falling) and every logit
tie (the lowest keys win); untrusted device values; the same bits twice. Over a backend that runs no kernel:
which workspace and which launches a call gets, what it refuses, and a prepared call that allocates nothing."""
import numpy as np
import pytest

import emu_harness as EH
import hipindexer
import paged_topk_cases as C
import paged_topk_fused_cases as F
from hipindexer import cache, reference, testing
from hipindexer.ops import ERROR_BLOCK_ID, ERROR_LENGTH, paged_topk_fused
from hipindexer.runtime import DeviceArray

D = 128


@pytest.mark.toolchain
def test_fused_cases_on_the_emulator(emu_kernels):
    p = EH.run_child_pytest(emu_kernels, "tests/emu/paged_topk_fused_cases.py")
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
    assert f"{len(F.CASES)} passed" in p.stdout and "skipped" not in p.stdout, p.stdout[-2000:]


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


def fused_inputs(seed, B=5, next_n=1, H=64, bs=64, ctx=20000, preshuffle=False, rows=False, ragged=False,
                 top_k=2048):
    """B sequences: wide ones (ctx keys), one of a third of that, one shorter than top_k, one of none."""
    rng = np.random.default_rng(seed)
    case = testing.DecodeCase(B, next_n, H, D, bs, preshuffle, mean_context=ctx, spread="equal", ragged=ragged,
                              live_min=1, key_codes=True)
    inp = testing.decode_inputs(rng, case)
    lens = inp.context_lens.copy()
    lens[1], lens[2], lens[3] = ctx // 3, max(1, top_k // 2), 0
    nl = inp.next_n_lens
    if rows:
        lens, nl = reference.per_row_lengths(lens, next_n, nl), None
    return testing.DecodeInputs(inp.q, inp.kv_cache, inp.weights, lens, inp.block_tables, inp.max_model_len, nl,
                                preshuffle)


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


def ordered_inputs(order, next_n, B=16, ctx=65536, H=64, bs=64):
    """Every key the same positive code vector, its scale rising, falling or the same along the sequence, and
    positive queries and weights: each row's logits rise, fall or tie along its keys. Enough keys per unit
    (B x ctx over the SMs) that a unit's candidates overflow the on-chip buffer when every key enters."""
    rng = np.random.default_rng({"rising": 1, "falling": 2, "tied": 3}[order])
    lens = np.full(B, ctx, np.int32)
    tables, num_blocks = cache.make_block_tables(lens, bs, rng, max_model_len=ctx, max_blocks=ctx // bs + 1)
    kv = cache.new_cache(num_blocks, bs, D)
    code = np.full((ctx, D), 0x38, np.uint8).view(testing.random_fp8(rng, (1,)).dtype)  # 1.0
    n = np.arange(ctx)
    scale = {"rising": 1 + n / ctx, "falling": 2 - n / ctx, "tied": np.ones(ctx)}[order]
    scale = (scale * 2.0 ** -6).astype(np.float32)
    for b in range(B):
        slots = tables[b, n // bs].astype(np.int64) * bs + n % bs
        cache.write_cache(kv, code, scale, slots)
    q = (testing.random_fp8(rng, (B, next_n, H, D)).view(np.uint8) & 0x3F).view(code.dtype)
    w = np.abs(rng.standard_normal((B * next_n, H), dtype=np.float32)) + 0.1
    return testing.DecodeInputs(q, kv, w, lens, tables, ctx, None, False)


@pytest.mark.gpu
@pytest.mark.parametrize("next_n", [1, 2])
@pytest.mark.parametrize("order", ["rising", "falling", "tied"])
def test_key_orders_that_fill_and_starve_the_on_chip_candidates(gpu_device, order, next_n):
    top_k = 2048
    inp = ordered_inputs(order, next_n)
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


@pytest.mark.gpu
def test_untrusted_device_values_are_skipped_and_flagged(gpu_device):
    """Block ids outside the cache and malformed lengths in device memory: bits 0 and 2 in errors=, and the
    selection the composed path makes on the same values (which the emulated cases pin to the logits op's)."""
    for rows in (False, True):
        inp = fused_inputs(71 + rows, B=6, next_n=2, ctx=9000, rows=rows, ragged=True)
        bt, lens = inp.block_tables.copy(), inp.context_lens.copy()
        bt[0, 2], bt[4, 20] = inp.kv_cache.shape[0], -5
        nl = None if rows else inp.next_n_lens.copy()
        if rows:
            lens[5, 1] = -7
        else:
            lens[5] = -7
        d = lambda a: None if a is None else DeviceArray.from_numpy(a, gpu_device)  # noqa: E731
        bad = testing.DecodeInputs(inp.q, inp.kv_cache, inp.weights, d(lens), d(bt), inp.max_model_len, d(nl), False)
        got = []
        for fused in (True, False):
            errors = DeviceArray.from_numpy(np.zeros(1, np.int32), gpu_device)
            got.append(hipindexer.fp8_paged_mqa_topk(*bad.args()[:6], 100, next_n_lens=bad.next_n_lens, sorted=True,
                                                     errors=errors, device=gpu_device, fused=fused).numpy())
            assert int(errors.numpy()[0]) == ERROR_BLOCK_ID | ERROR_LENGTH, fused
        assert (got[0] == got[1]).all()
        assert not np.isin(np.arange(128, 192), got[0][0:2]).any()  # the keys of sequence 0's bad block


@pytest.mark.gpu
def test_the_fused_top_k_gives_the_same_bits_twice(gpu_device):
    inp = fused_inputs(5, next_n=2, ragged=True)
    ws = fused_workspace(gpu_device, inp, 2048)
    for sorted in (False, True):
        a, b = (C.run(gpu_device, inp, 2048, sorted, workspace=ws) for _ in range(2))
        assert all((x.view(np.uint32) == y.view(np.uint32)).all() for x, y in zip(a, b))


# ------------------------------------------------------------------ the host side, over a backend that runs no kernel

def _resident(dev, inp):
    return testing.DecodeInputs(*[DeviceArray.from_numpy(a, dev) if isinstance(a, np.ndarray) else a
                                  for a in inp.args()])


def test_which_workspace_and_launches_a_call_gets(hopper):
    hb, dev = hopper
    inp = _resident(dev, fused_inputs(1, B=4, next_n=2, ctx=3000, top_k=256))
    for B, n, k, bs, H in ((64, 1, 2048, 64, 64), (256, 2, 2048, 16, 32), (1, 1, 7, 64, 64), (2048, 1, 64, 64, 64)):
        ws = hipindexer.paged_topk_workspace(B, n, k, 1 << 17, bs, device=dev, heads=H)
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
        args = dict(B=4, next_n=2, top_k=256, max_model_len=3000, block_size=64, device=dev) | kw
        assert not hipindexer.paged_topk_workspace(**args).fused, kw  # the fused kernel cannot serve, or not pay
    assert hipindexer.paged_topk_workspace(4, 2, 256, 3000, 64, device=dev, heads=64, fused=True).fused
    n0 = len(hb.launches)
    hipindexer.fp8_paged_mqa_topk(*inp.args()[:6], 256)  # thin pieces (fused_pays): the composed path
    assert "hx_paged_topk_step" in [fn for fn, *_ in hb.launches[n0:]]
    n0 = len(hb.launches)
    hipindexer.fp8_paged_mqa_topk(*inp.args()[:6], 256, return_values=True, return_slots=True, fused=True)
    assert [fn for fn, *_ in hb.launches[n0:]] == ["hx_paged_mqa_topk_wgmma_tma", "hx_paged_topk_merge"]
    sel = hipindexer.catalog.STRUCT["DecodeTopkParams"].ctype().from_buffer_copy(hb.launches[n0][4])
    assert (sel.top_k, sel.next_n, sel.out, sel.clean) == (256, 2, 0, 0) and sel.kv_map != 0
    merge = hipindexer.catalog.STRUCT["PagedTopkMergeParams"].ctype().from_buffer_copy(hb.launches[n0 + 1][4])
    assert merge.parts == sel.parts and merge.seq_nparts == sel.seq_nparts and merge.units == hb.launches[n0][1][0]
    assert merge.values != 0 and merge.slots != 0
    n1 = len(hb.launches)
    hipindexer.fp8_paged_mqa_topk(*inp.args()[:6], 256, fused=False)
    assert "hx_paged_topk_step" in [fn for fn, *_ in hb.launches[n1:]]


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
        ws = hipindexer.paged_topk_workspace(B, n, k, 1 << 17, bs, device=dev, heads=H)
        assert ws.fused and ws.units == 512 and ws.nbytes <= ws.bound, ws
    n0 = len(hb.launches)
    hipindexer.fp8_paged_mqa_topk(*inp.args()[:6], 256, return_values=True, fused=True, cap=256 + 512)
    launches = hb.launches[n0:]
    assert [fn for fn, *_ in launches] == ["hx_paged_mqa_topk_mfma", "hx_paged_topk_merge"]
    assert launches[0][1][0] <= 512 and launches[0][2][0] == 256
    sel = hipindexer.catalog.STRUCT["DecodeTopkParams"].ctype().from_buffer_copy(launches[0][4])
    assert (sel.top_k, sel.next_n, sel.kv_map, sel.cap, sel.block_size) == (256, 2, 0, 768, 16)
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
    composed = hipindexer.paged_topk_workspace(4, 2, 256, 3000, 64, device=dev)
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
