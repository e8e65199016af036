"""hipindexer.fp8_paged_mqa_topk: the cases of tests/emu/paged_topk_cases.py on the emulated MI355X (a child pytest
whose HIP is the emulator, on the tests' gfx950 build), the quick `hipindexer check topk` there, the same cases
marked gpu on a real GPU (skipped without one), and the op's host side over a backend that runs no kernel: its
chunk plan and workspace bound, every check before anything moves, and a prepared call that allocates and copies
nothing."""
import json

import numpy as np
import pytest

import emu_harness as H
import paged_topk_cases as C
from hipindexer import catalog, fp8_paged_mqa_logits, fp8_paged_mqa_topk, paged_topk_workspace, testing, topk_logits
from hipindexer.ops import paged_topk, paged_topk_whole
from hipindexer.runtime import DeviceArray
from hipindexer.plan import TARGETS


@pytest.mark.toolchain
@pytest.mark.mutation("paged_topk")
def test_paged_topk_cases_pass_on_the_emulator_and_every_paged_topk_plant_fails_them(emu_kernels):
    H.assert_cases_pass_and_every_plant_fails_them("paged_topk", len(C.CASES))


@pytest.mark.toolchain
def test_quick_topk_sweep_passes_on_the_emulator(emu_kernels):
    p = H.run_cli(emu_kernels, "check", "topk", "--device", "emu:gfx950", "--quick", "--json", timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads(p.stdout)
    summary = doc["summary"]["topk"]
    assert summary["failed"] == 0 and summary["run"] >= 12, summary
    names = " ".join(c["case"] for c in doc["cases"])
    for part in ("_k512", "_k2048", "_rowlens", "_bs16", "_bs64", "chunks"):
        assert part in names, part
    assert "sample: " in p.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(C.CASES))
def test_paged_topk_cases_on_the_gpu(gpu_device, name):
    C.CASES[name](gpu_device)


# ------------------------------------------------------------------ the bound, as a formula

@pytest.mark.parametrize("B,next_n,top_k,bs,units", [(1, 1, 1, 1, 132), (64, 1, 2048, 64, 132),
                                                    (256, 2, 2048, 16, 256), (1024, 8, 512, 64, 132),
                                                    (3, 2, 4096, 16, 4), (8192, 8, 16, 16, 132)])
def test_the_widest_chunk_keeps_the_workspace_within_the_bound(B, next_n, top_k, bs, units):
    C_ = paged_topk.widest_chunk(B, next_n, top_k, bs, units)
    bound = 8 * top_k * next_n * (2 * B + units) + (1 << 20)
    assert C_ % bs == 0 and C_ >= bs
    assert paged_topk.workspace_bytes(B, next_n, top_k, C_, bs) <= bound
    assert paged_topk.workspace_bytes(B, next_n, top_k, C_ + bs, bs) > bound  # and it is the widest


# ------------------------------------------------------------------ the host side, over a backend that runs no kernel


def _inputs(dev, B=2, ctx=3000, device_resident=True, H=16, D=64):
    inp = testing.decode_inputs(np.random.default_rng(0), testing.DecodeCase(B, 2, H, D, 64, mean_context=ctx,
                                                                             key_codes=True))
    if not device_resident:
        return inp
    return testing.DecodeInputs(*[DeviceArray.from_numpy(a, dev) if isinstance(a, np.ndarray) else a
                                  for a in inp.args()])


def _symbols(hb, since):
    return [fn for fn, *_ in hb.launches[since:]]


def test_every_check_runs_before_anything_is_copied(hopper):
    hb, dev = hopper
    inp = _inputs(dev, device_resident=False)
    for change, error in [(dict(top_k=0), ValueError), (dict(context_lens=inp.context_lens[:1]), ValueError),
                          (dict(out=DeviceArray.empty((4, 7), np.int32, dev)), ValueError),
                          (dict(chunk=100), ValueError), (dict(kernel="nope"), ValueError),
                          (dict(workspace=object()), TypeError)]:
        args = dict(zip(("q", "kv_cache", "weights", "context_lens", "block_tables", "max_model_len"),
                        inp.args()[:6]), top_k=8, device=dev) | change
        with pytest.raises(error):
            fp8_paged_mqa_topk(**args)
    assert hb.htod == 0 and not hb.launches


@pytest.mark.parametrize("H, D", [(16, 64), (64, 128)])  # the generic logits kernel; the tensor-map one
def test_chunks_and_what_each_launch_is_sent(hopper, H, D):
    """A row wider than the workspace: per chunk the logits op (the first on the caller's inputs, the others on
    the lengths and table the previous step wrote) and the step, the last step writing values and slots; a row
    that fits is one logits call and one step; a prepared call sends what the first sent."""
    hb, dev = hopper
    inp = _inputs(dev, H=H, D=D)
    mml = inp.max_model_len
    ws = paged_topk_workspace(2, 2, 64, mml, 64, device=dev, chunk=1024)
    n0 = len(hb.launches)
    fp8_paged_mqa_topk(*inp.args()[:6], 64, workspace=ws, return_values=True, return_slots=True)
    chunks = -(-mml // 1024)
    got = _symbols(hb, n0)
    logits = got[0]
    assert got == [logits, "hx_paged_topk_step"] * chunks
    step = catalog.STRUCT["PagedTopkStepParams"]
    last = step.ctype().from_buffer_copy(hb.launches[-1][4])
    assert (last.base, last.last, last.top_k, last.width) == ((chunks - 1) * 1024, 1, 64, mml - (chunks - 1) * 1024)
    assert last.values != 0 and last.slots != 0 and last.w == ws.w.ptr
    first = step.ctype().from_buffer_copy(hb.launches[n0 + 1][4])
    assert (first.base, first.next_key, first.last, first.chunk_blocks) == (0, 1024, 0, 16)
    assert first.chunk_lens == ws.lens.ptr and first.chunk_table == ws.table.ptr
    tma = logits.endswith("_tma")
    assert tma == (H == 64)
    struct = catalog.STRUCT["DecodeTmaParams" if tma else "DecodeParams"]
    second = struct.ctype().from_buffer_copy(hb.launches[n0 + 2][4])
    assert second.context_lens == ws.lens.ptr and second.block_tables == ws.table.ptr and second.max_blocks == 16
    # every logits launch writes W's first chunk column; a later call, on the prepared path, sends the same
    sent = [struct.ctype().from_buffer_copy(hb.launches[i][4]) for i in range(n0, n0 + 2 * chunks, 2)]
    assert all(p.out == ws.w.ptr + 4 * 64 for p in sent)
    assert not tma or {bytes(p.kv_map) for p in sent} == {inp.kv_cache.ptr.to_bytes(8, "little") * 16}, \
        "the cache's one tensor map, by value, in every chunk's launch"
    n_again = len(hb.launches)
    fp8_paged_mqa_topk(*inp.args()[:6], 64, workspace=ws, return_values=True, return_slots=True)
    assert [hb.launches[i][4] for i in range(n_again, len(hb.launches))] == \
        [hb.launches[i][4] for i in range(n0, n0 + 2 * chunks)]
    n1 = len(hb.launches)
    one = paged_topk_workspace(2, 2, 64, mml, 64, device=dev, whole=False)
    fp8_paged_mqa_topk(*inp.args()[:6], 64, workspace=one)
    assert _symbols(hb, n1) == [logits, "hx_paged_topk_step"]


def test_the_whole_row_path_is_the_logits_op_then_topk_logits_then_the_slots(hopper):
    """whole=True: the logits op into the workspace (clean, at its row stride), topk_logits' launches over it, and
    topk_slots only where slots are asked for; a prepared call sends what the first sent and allocates nothing."""
    hb, dev = hopper
    inp = _inputs(dev)
    mml = inp.max_model_len
    ws = paged_topk_workspace(2, 2, 64, mml, 64, device=dev, whole=True)
    assert ws.whole and not ws.fused and ws.width == mml and ws.nbytes <= ws.bound
    assert ws.nbytes == paged_topk_whole.whole_workspace_bytes(2, 2, 64, mml, TARGETS["sm_90a"])
    outs = tuple(DeviceArray.empty((4, 64), dt, dev) for dt in (np.int32, np.float32, np.int32))
    errors = DeviceArray.from_numpy(np.zeros(1, np.int32), dev)
    kw = dict(workspace=ws, out=outs, errors=errors, return_values=True, return_slots=True)
    n0 = len(hb.launches)
    fp8_paged_mqa_topk(*inp.args()[:6], 64, **kw)
    got = _symbols(hb, n0)
    assert got[0] == "hx_paged_mqa_logits_generic" and got[-1] == "hx_topk_slots"
    assert "hx_paged_topk_step" not in got and all("topk" in fn for fn in got[1:-1]) and len(got) >= 3
    sent = catalog.STRUCT["DecodeParams"].ctype().from_buffer_copy(hb.launches[n0][4])
    assert sent.out == ws.w.ptr and sent.clean == 1 and sent.out_stride == paged_topk_whole.whole_width(mml)
    slots = catalog.STRUCT["TopkSlotsParams"].ctype().from_buffer_copy(hb.launches[-1][4])
    assert (slots.indices, slots.slots, slots.rows, slots.top_k, slots.next_n) == (outs[0].ptr, outs[2].ptr, 4, 64, 2)
    mallocs = []
    real = hb.malloc
    hb.malloc = lambda n, s: mallocs.append(n) or real(n, s)
    try:
        copies, n1 = hb.htod, len(hb.launches)
        fp8_paged_mqa_topk(*inp.args()[:6], 64, **kw)
        assert [l[4] for l in hb.launches[n1:]] == [l[4] for l in hb.launches[n0:n1]]
        assert not mallocs and hb.htod == copies
    finally:
        hb.malloc = real
    n2 = len(hb.launches)
    fp8_paged_mqa_topk(*inp.args()[:6], 64, whole=True)
    assert "hx_topk_slots" not in _symbols(hb, n2) and "hx_paged_topk_step" not in _symbols(hb, n2)


@pytest.mark.parametrize("B,ctx", [(2, 3000), (1, 40000)])  # topk_logits: row-wise, split
def test_the_whole_row_path_sends_what_the_logits_op_and_topk_logits_send(hopper, B, ctx):
    """The path holds its own launches (no public op on its hot path): byte for byte those of fp8_paged_mqa_logits
    into the workspace's logits (clean) and topk_logits over them with the workspace's own, on every topk_logits
    path the shapes reach, sorted or not, with values or not."""
    hb, dev = hopper
    inp = _inputs(dev, B=B, ctx=ctx)
    mml, R = inp.max_model_len, 2 * B
    ws = paged_topk_workspace(B, 2, 64, mml, 64, device=dev, whole=True)
    errors = DeviceArray.from_numpy(np.zeros(1, np.int32), dev)
    idx, vals = (DeviceArray.empty((R, 64), dt, dev) for dt in (np.int32, np.float32))
    for sort, values in ((False, False), (True, True)):
        out = (idx, vals) if values else idx
        for _ in range(2):  # the call that plans, then the prepared one
            n0 = len(hb.launches)
            fp8_paged_mqa_topk(*inp.args()[:6], 64, workspace=ws, out=out, errors=errors, sorted=sort,
                               return_values=values)
            mine = hb.launches[n0:]
            n1 = len(hb.launches)
            logits = ws.w[:R, :mml]
            fp8_paged_mqa_logits(*inp.args()[:6], clean_logits=True, errors=errors, out=logits, device=dev)
            topk_logits(logits, 64, sorted=sort, return_values=values, out=idx, values=vals if values else None,
                        workspace=ws.topk, device=dev)
            assert hb.launches[n1:] == mine


def test_a_whole_row_call_planned_onto_the_split_path_without_its_workspace_reads_its_rows_row_wise(hopper,
                                                                                                    monkeypatch):
    """A whole-row workspace holds topk_logits' workspace only where its own rows would take the split path
    (whole_topk_bytes); a call of fewer sequences or shorter rows that plans the split path anyway takes the
    row-wise path, which needs none, instead of reading past the workspace."""
    hb, dev = hopper
    inp = _inputs(dev)
    ws = paged_topk_workspace(2, 2, 64, inp.max_model_len, 64, device=dev, whole=True)
    assert ws.whole and ws.topk.nbytes == 0
    real = paged_topk_whole.plan_topk
    monkeypatch.setattr(paged_topk_whole, "plan_topk",
                        lambda *a, **kw: real(*a, **kw) if kw.get("rowwise") else real(*a, split=True, **kw))
    n0 = len(hb.launches)
    fp8_paged_mqa_topk(*inp.args()[:6], 64, workspace=ws)
    assert _symbols(hb, n0) == ["hx_paged_mqa_logits_generic", "hx_topk_rowwise"]


def test_the_whole_row_path_is_taken_where_it_pays_and_refused_where_it_cannot_serve(hopper):
    hb, dev = hopper
    for B, n, mml, whole in ((1, 1, 131072, True), (4, 2, 131072, True), (8, 2, 65536, True), (16, 2, 32768, True),
                             (1, 1, 16384, True), (4, 2, 8192, True), (32, 2, 8192, True), (64, 1, 8192, True),
                             (2, 1, 32768, True), (1, 2, 65536, True), (32, 1, 32768, True), (16, 1, 131072, False),
                             (64, 1, 32768, False), (128, 2, 16384, False)):
        assert paged_topk_workspace(B, n, 2048, mml, 64, device=dev).whole == whole, (B, n, mml)
        assert paged_topk_whole.whole_pays(B, n, 2048, mml, TARGETS["sm_90a"]) == whole
    assert not paged_topk_workspace(1, 1, 2048, 131072, 64, device=dev, whole=False).whole
    assert not paged_topk_workspace(1, 1, 2048, 131072, 64, device=dev, chunk=4096).whole
    inp = _inputs(dev, device_resident=False)
    mml = inp.max_model_len
    args = inp.args()[:6]
    n0, copies = len(hb.launches), hb.htod
    for kw, match in [(dict(whole=True, fused=True), "^whole: True asks for the whole-row path"),
                      (dict(whole=True, chunk=64), "^whole: True asks for the whole-row path"),
                      (dict(whole="yes"), "^whole: expected None"),
                      (dict(whole=True, workspace=paged_topk_workspace(2, 2, 64, mml, 64, device=dev, chunk=64)),
                       "^whole: True needs a whole-row workspace"),
                      (dict(workspace=paged_topk_workspace(2, 2, 64, mml - 1, 64, device=dev, whole=True)),
                       "^workspace: holds rows of up to"),
                      (dict(fused=False, workspace=paged_topk_workspace(2, 2, 64, mml, 64, device=dev, whole=True)),
                       "^workspace: made for the whole-row path"),
                      (dict(whole=True, top_k=4096, max_model_len=1 << 20), "^whole: True, but the logits")]:
        call = dict(zip(("q", "kv_cache", "weights", "context_lens", "block_tables", "max_model_len"), args),
                    top_k=64, device=dev) | kw
        with pytest.raises(ValueError, match=match):
            fp8_paged_mqa_topk(**call)
    assert hb.htod == copies and len(hb.launches) == n0
    with pytest.raises(ValueError, match="^whole: True, but the logits"):
        paged_topk_workspace(64, 1, 2048, 32768, 64, device=dev, whole=True)


def test_a_prepared_call_still_refuses_a_misaligned_pointer(hopper):
    hb, dev = hopper
    inp = _inputs(dev)
    ws = paged_topk_workspace(2, 2, 64, inp.max_model_len, 64, device=dev)
    idx = DeviceArray.empty((4, 64), np.int32, dev)
    args = list(inp.args()[:6])
    fp8_paged_mqa_topk(*args, 64, workspace=ws, out=idx)
    cache = inp.kv_cache.numpy()
    padded = DeviceArray.from_numpy(np.concatenate([cache.ravel(), np.zeros(16, np.uint8)]), dev)
    for offset in (16, 8):
        args[1] = DeviceArray(padded.ptr + offset, cache.shape, cache.dtype, dev, owner=padded)
        if offset == 16:
            fp8_paged_mqa_topk(*args, 64, workspace=ws, out=idx)
        else:
            with pytest.raises(ValueError, match="kv_cache: .* must be 16-byte aligned"):
                fp8_paged_mqa_topk(*args, 64, workspace=ws, out=idx)


def test_a_prepared_call_allocates_and_copies_nothing(hopper, monkeypatch):
    hb, dev = hopper
    inp = _inputs(dev)
    ws = paged_topk_workspace(2, 2, 64, inp.max_model_len, 64, device=dev, chunk=1024)
    outs = tuple(DeviceArray.empty((4, 64), dt, dev) for dt in (np.int32, np.float32, np.int32))
    errors = DeviceArray.from_numpy(np.zeros(1, np.int32), dev)
    kw = dict(workspace=ws, out=outs, errors=errors, return_values=True, return_slots=True)
    fp8_paged_mqa_topk(*inp.args()[:6], 64, **kw)
    mallocs = []
    real = hb.malloc
    monkeypatch.setattr(hb, "malloc", lambda n, s: mallocs.append(n) or real(n, s))
    copies, n0 = hb.htod, len(hb.launches)
    for sorted in (False, True, False):
        got = fp8_paged_mqa_topk(*inp.args()[:6], 64, sorted=sorted, **kw)
        assert got == outs
    assert not mallocs and hb.htod == copies and len(hb.launches) > n0
