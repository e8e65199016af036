"""hipindexer.fp8_mqa_topk: the cases of tests/emu/prefill_topk_cases.py on the emulated MI355X (a child pytest
whose HIP is the emulator, on the tests' gfx950 build), the same cases marked gpu on a real GPU (skipped without
one), and the op's host side over a backend that runs no kernel: its workspace plan and bound, every check before
anything moves, the launches of a call, and a prepared call that allocates and copies nothing."""
import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import emu_harness as H
import prefill_topk_cases as C
from hipindexer import catalog, fp8_mqa_topk, prefill_topk_workspace, testing
from hipindexer.ops import prefill_topk
from hipindexer.runtime import DeviceArray


@pytest.mark.toolchain
@pytest.mark.mutation("prefill_topk")
def test_prefill_topk_cases_pass_on_the_emulator_and_every_prefill_topk_plant_fails_them(emu_kernels):
    H.assert_cases_pass_and_every_plant_fails_them("prefill_topk", len(C.CASES))


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(C.CASES))
def test_prefill_topk_cases_on_the_gpu(gpu_device, name):
    C.CASES[name](gpu_device)


# ------------------------------------------------------------------ the bound, as a formula

@settings(max_examples=300, deadline=None)
@given(M=st.integers(1, 1 << 16), N=st.integers(1, 1 << 22), top_k=st.integers(1, 4096))
def test_the_planned_workspace_stays_within_the_bound_whatever_n(M, N, top_k):
    rows, chunk, filtered = prefill_topk.plan_prefill_topk(M, N, top_k)
    assert 1 <= rows <= M and 1 <= chunk <= N
    assert prefill_topk.workspace_bytes(rows, top_k, chunk, filtered) <= 8 * top_k * M * 2 + (1 << 20)
    assert filtered or len(prefill_topk.chunk_starts(N, chunk, top_k, False)) <= prefill_topk.FILTER_CHUNKS
    assert rows >= min(M, prefill_topk.ROWS_MIN) or chunk == N


def test_a_forced_shape_past_the_bound_is_refused():
    with pytest.raises(ValueError, match="must fit the bound"):
        prefill_topk.plan_prefill_topk(64, 1 << 20, 2048, rows=64, chunk=1 << 20)
    with pytest.raises(ValueError, match="rows: expected an int >= 1"):
        prefill_topk.plan_prefill_topk(64, 1000, 8, rows=0)


# ------------------------------------------------------------------ the host side, over a backend that runs no kernel

def _inputs(dev, M=40, N=3000, device_resident=True, mode="causal"):
    inp = testing.prefill_inputs(np.random.default_rng(0), M, N, 16, 64, mode)
    if not device_resident:
        return inp
    return testing.PrefillInputs(*[DeviceArray.from_numpy(a, dev) for a in inp.args()])


def _symbols(hb, since):
    return [fn for fn, *_ in hb.launches[since:]]


def test_every_check_runs_before_anything_is_copied(hopper):
    hb, dev = hopper
    inp = _inputs(dev, device_resident=False)
    far = testing.PrefillInputs(inp.q, inp.k, inp.kv_scale, inp.weights,
                                np.full_like(inp.cu_seqlen_ks, -(1 << 31)), inp.cu_seqlen_ke)
    for args, change, error in [(inp, dict(top_k=0), ValueError), (inp, dict(top_k=4097), ValueError),
                                (inp, dict(out=DeviceArray.empty((40, 7), np.int32, dev)), ValueError),
                                (inp, dict(rows=0), ValueError), (inp, dict(kernel="nope"), ValueError),
                                (inp, dict(workspace=object()), TypeError), (inp, dict(sorted=1), TypeError),
                                (inp, dict(nope=1), TypeError), (inp, dict(step_block=128), ValueError),
                                (far, dict(relative=True), ValueError)]:
        kw = dict(top_k=8, device=dev) | change
        with pytest.raises(error):
            fp8_mqa_topk(*args.args(), **kw)
    with pytest.raises(ValueError, match="workspace: made for top_k=8 and M <= 20"):
        fp8_mqa_topk(*inp.args(), 8, device=dev, workspace=prefill_topk_workspace(20, 3000, 8, device=dev))
    assert hb.htod == 0 and not hb.launches


def test_groups_chunks_and_what_each_launch_is_sent(hopper):
    """Rows in groups, keys in chunks (a first of 4 top_k keys): per chunk the logits kernel (the first on the
    caller's windows, the others on those the previous step wrote) and the step, the last step writing values and
    the relative shift; a row that fits one chunk is one logits launch and one step."""
    hb, dev = hopper
    inp = _inputs(dev)
    ws = prefill_topk_workspace(40, 3000, 64, device=dev, rows=16, chunk=1024, filtered=True)
    n0 = len(hb.launches)
    fp8_mqa_topk(*inp.args(), 64, workspace=ws, return_values=True, relative=True)
    got = _symbols(hb, n0)
    logits = got[0]
    assert prefill_topk.chunk_starts(3000, 1024, 64, True) == [0, 256, 1280, 2304]
    assert got == [logits, "hx_topk_chunk_step"] * 4 * 3  # 16 + 16 + 8 rows
    step = catalog.STRUCT["TopkStepParams"]
    prefill = catalog.STRUCT["PrefillParams"]
    first, second = (step.ctype().from_buffer_copy(hb.launches[n0 + i][4]) for i in (1, 3))
    assert (first.base, first.width, first.next_key, first.next_width, first.last) == (0, 256, 256, 1024, 0)
    assert (second.base, second.width, second.next_key, second.next_width) == (256, 1024, 1280, 1024)
    assert first.rel == inp.cu_seqlen_ks.ptr and first.chunk_ks == ws.windows.ptr
    a, b = (prefill.ctype().from_buffer_copy(hb.launches[n0 + i][4]) for i in (0, 2))
    assert (a.ks, a.N, b.ks, b.N) == (inp.cu_seqlen_ks.ptr, 256, ws.windows.ptr, 1024)
    assert b.k == inp.k.ptr + 256 * 64 and b.out == ws.w.ptr + 4 * 64 and b.out_stride == 64 + 1024
    last = step.ctype().from_buffer_copy(hb.launches[-1][4])
    assert (last.base, last.width, last.last, last.rows, last.top_k) == (2304, 3000 - 2304, 1, 8, 64)
    assert last.values != 0 and last.rel == inp.cu_seqlen_ks.ptr + 4 * 32 and last.w == ws.w.ptr
    assert last.cols == ws.cols.ptr and last.cols_stride == 1024 and last.w_stride == 64 + 1024
    n1 = len(hb.launches)
    plain = prefill_topk_workspace(40, 3000, 64, device=dev, rows=16, chunk=1024, filtered=False)
    fp8_mqa_topk(*inp.args(), 64, workspace=plain)
    assert prefill_topk.chunk_starts(3000, 1024, 64, False) == [0, 1024, 2048]
    assert _symbols(hb, n1) == [logits, "hx_topk_chunk_step"] * 3 * 3 and plain.cols is None
    assert step.ctype().from_buffer_copy(hb.launches[-1][4]).cols == 0
    n2 = len(hb.launches)
    fp8_mqa_topk(*inp.args(), 64, workspace=prefill_topk_workspace(40, 3000, 64, device=dev), relative=True)
    assert _symbols(hb, n2) == [logits, "hx_topk_chunk_step"]


def test_a_prepared_call_allocates_and_copies_nothing(hopper, monkeypatch):
    hb, dev = hopper
    inp = _inputs(dev)
    ws = prefill_topk_workspace(40, 3000, 64, device=dev, rows=16, chunk=1024, filtered=True)
    outs = (DeviceArray.empty((40, 64), np.int32, dev), DeviceArray.empty((40, 64), np.float32, dev))
    kw = dict(workspace=ws, out=outs, return_values=True)
    fp8_mqa_topk(*inp.args(), 64, **kw)
    mallocs = []
    real = hb.malloc
    monkeypatch.setattr(hb, "malloc", lambda n, s: mallocs.append(n) or real(n, s))
    copies, n0 = hb.htod, len(hb.launches)
    for sorted in (False, True, False):
        got = fp8_mqa_topk(*inp.args(), 64, sorted=sorted, **kw)
        assert got == outs
    assert not mallocs and hb.htod == copies and len(hb.launches) == n0 + 3 * 3 * 4 * 2


def test_a_prepared_call_still_refuses_a_misaligned_pointer(hopper):
    hb, dev = hopper
    inp = _inputs(dev)
    ws = prefill_topk_workspace(40, 3000, 64, device=dev)
    idx = DeviceArray.empty((40, 64), np.int32, dev)
    fp8_mqa_topk(*inp.args(), 64, workspace=ws, out=idx)
    k = inp.k.numpy()
    padded = DeviceArray.from_numpy(np.concatenate([k.view(np.uint8).ravel(), np.zeros(16, np.uint8)]), dev)
    for offset in (16, 8):
        moved = DeviceArray(padded.ptr + offset, k.shape, k.dtype, dev, owner=padded)
        args = (inp.q, moved, *inp.args()[2:])
        if offset == 16:
            fp8_mqa_topk(*args, 64, workspace=ws, out=idx)
        else:
            with pytest.raises(ValueError, match="k: .* must be 16-byte aligned"):
                fp8_mqa_topk(*args, 64, workspace=ws, out=idx)


@pytest.mark.toolchain
def test_quick_prefill_topk_sweep_passes_on_the_emulator(emu_kernels):
    p = H.run_cli(emu_kernels, "check", "topk", "--op", "prefill", "--device", "emu:gfx950", "--quick", "--json",
                  timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads(p.stdout)
    summary = doc["summary"]["topk"]
    assert summary["failed"] == 0 and summary["run"] >= 20, summary
    names = " ".join(c["case"] for c in doc["cases"])
    for part in ("causal", "cp", "misaligned", "empty", "past_end", "multi_req", "_k2048", "_relative", "_small",
                 "_planned", "_H64_D128"):
        assert part in names, part


@pytest.mark.toolchain
@pytest.mark.parametrize("op,count", [("prefill", 1), ("decode", 2)])
def test_bench_topk_on_the_emulator_times_the_three_ways_and_says_its_times_are_not_speeds(emu_kernels, op, count):
    p = H.run_cli(emu_kernels, "bench", "topk", "--op", op, "--device", "emu:gfx950", "--repeats", "1", "--top-k",
                  "64", "--json", timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert doc["emulated"] and "not speeds" in doc["note"] and doc["read_GBps"] > 0 and len(doc["cases"]) == count
    for c in doc["cases"]:
        assert c["op"] == op and min(c["us"], c["us_logits"], c["us_logits_then_topk_logits"], c["host_us"]) > 0
        assert c["workspace_bytes"] <= c["workspace_bound"] and c["top_k"] == 64


# ------------------------------------------------------------------ the fused path's host side

@settings(max_examples=200, deadline=None)
@given(M=st.integers(1, 1 << 13), N=st.integers(1, 1 << 21), top_k=st.integers(128, 2048))
def test_the_fused_layout_stays_within_the_bound_of_its_key_split(M, N, top_k):
    from hipindexer.ops import prefill_topk_fused as F
    from hipindexer.plan import TARGETS
    try:
        lay = F.plan_fused(TARGETS["sm_90a"], M, N, 64, 128, top_k)
    except ValueError as e:  # the sample's keys alone past the bound (few rows, many keys): the composed path's
        assert "does not fit" in str(e) and N // F.sample_step(top_k) * 128 > 8 * top_k * M
        return
    assert 1 <= lay.rows <= M and lay.nbytes <= 8 * top_k * M * (1 + lay.parts) + (1 << 20)
    assert lay.region >= F.REGION_MARGIN * F.SAMPLE_MARGIN * top_k / lay.parts
    assert 4 * lay.rows * lay.samples <= lay.nbytes - lay.cand  # the sample's logits share the regions' bytes


@pytest.mark.parametrize("arch,H", [("gfx950", 32), ("gfx950", 64), ("sm_90a", 32), ("sm_90a", 64)])
def test_the_filter_splits_the_keys_in_no_more_parts_than_the_finish_reads_at_once(arch, H):
    # the finish reads a row's parts a thread each; gfx950's own plan at a few rows asks for up to 763
    from hipindexer.ops import prefill_topk_fused as F
    from hipindexer.plan import TARGETS
    assert F.max_parts() == catalog.KERNEL["prefill_topk_finish"].block == 256
    for M, N in ((1, 1 << 17), (16, 1 << 17), (1, 1 << 20), (64, 1 << 17), (4096, 1 << 15)):
        fp = F.filter_plan(TARGETS[arch], M, N, H, 128)
        assert F.MIN_PARTS <= fp.split <= F.max_parts(), (M, N, fp.split)


def test_the_finish_keeps_four_blocks_an_sm90a_sm():
    # its rows wait on their loads, and four in flight an SM hide them: 64 registers, and the two words of a row
    # ptxas keeps in local memory for that (read once a slice of its list) and no more
    from hipindexer.runtime.module import DEFAULT_MANIFEST
    if not DEFAULT_MANIFEST.is_file():
        pytest.skip("no built kernels")
    entries = [e for e in json.loads(DEFAULT_MANIFEST.read_text())["kernels"]
               if e["target"] == "sm_90a" and e["name"] == "prefill_topk_finish"]
    if not entries:
        pytest.skip("the manifest has no sm_90a build")
    r = entries[0]["resources"]
    assert r["registers"] * catalog.KERNEL["prefill_topk_finish"].block * 4 <= 65536, r
    assert r["spill_stores"] <= 16 and r["spill_loads"] <= 24, r
    assert 4 * (r["shared"] + entries[0]["dynamic_smem"]) <= 227 * 1024, r


def test_the_fused_path_is_the_default_where_a_tensor_core_filter_serves(hopper):
    """H = 64, D = 128, 1024 <= top_k <= 2048 on sm_90a: five launches (sample, the logits op on it, floors, the
    fold kernel's filter, finish), the filter sent the workspace's regions, counts and floors; a workspace made
    without H and D, or fused=False, keeps the composed path, and so does a top_k below 1024 by default."""
    hb, dev = hopper
    inp = testing.prefill_inputs(np.random.default_rng(3), 48, 4096, 64, 128, "causal")
    args = [DeviceArray.from_numpy(a, dev) for a in inp.args()]
    ws = prefill_topk_workspace(48, 4096, 1024, device=dev, H=64, D=128)
    assert type(ws).__name__ == "FusedPrefillTopkWorkspace" and ws.nbytes <= ws.bound
    n0 = len(hb.launches)
    fp8_mqa_topk(*args, 1024, workspace=ws, relative=True)
    got = _symbols(hb, n0)
    assert got == ["hx_prefill_topk_sample", got[1], "hx_prefill_topk_floor", "hx_mqa_topk_wgmma_fold",
                   "hx_prefill_topk_finish"]
    sample = catalog.STRUCT["PrefillParams"].ctype().from_buffer_copy(hb.launches[n0 + 1][4])
    assert sample.clean == 0 and sample.N == ws.layout.samples  # the floors read only the windows' samples
    filt = catalog.STRUCT["PrefillTopkParams"].ctype().from_buffer_copy(hb.launches[n0 + 3][4])
    lay = ws.layout
    assert (filt.cand, filt.cand_counts, filt.floors) == (ws.buf.ptr + lay.cand, ws.buf.ptr + lay.counts,
                                                          ws.buf.ptr + lay.floors)
    assert filt.split == lay.parts >= 2 and filt.region == lay.region and filt.clean == 0 and filt.out == 0
    fin = catalog.STRUCT["PrefillTopkFinishParams"].ctype().from_buffer_copy(hb.launches[n0 + 4][4])
    assert (fin.relative, fin.recompute_all, fin.parts, fin.top_k) == (1, 0, lay.parts, 1024)
    n1 = len(hb.launches)
    fp8_mqa_topk(*args, 1024, workspace=prefill_topk_workspace(48, 4096, 1024, device=dev))
    fp8_mqa_topk(*args, 1024, fused=False)
    assert "hx_topk_chunk_step" in _symbols(hb, n1) and "hx_prefill_topk_finish" not in _symbols(hb, n1)
    with pytest.raises(ValueError, match="fused=False: the workspace is a FusedPrefillTopkWorkspace"):
        fp8_mqa_topk(*args, 1024, workspace=ws, fused=False)
    with pytest.raises(ValueError, match="chunk belong to the composed path"):
        fp8_mqa_topk(*args, 1024, workspace=ws, chunk=1024)
    assert type(prefill_topk_workspace(48, 4096, 512, device=dev, H=64, D=128)).__name__ == "PrefillTopkWorkspace"


def test_a_prepared_fused_call_allocates_and_copies_nothing(hopper, monkeypatch):
    hb, dev = hopper
    inp = testing.prefill_inputs(np.random.default_rng(4), 48, 4096, 64, 128, "causal")
    args = [DeviceArray.from_numpy(a, dev) for a in inp.args()]
    ws = prefill_topk_workspace(48, 4096, 1024, device=dev, H=64, D=128)
    outs = (DeviceArray.empty((48, 1024), np.int32, dev), DeviceArray.empty((48, 1024), np.float32, dev))
    kw = dict(workspace=ws, out=outs, return_values=True)
    fp8_mqa_topk(*args, 1024, **kw)
    mallocs = []
    real = hb.malloc
    monkeypatch.setattr(hb, "malloc", lambda n, s: mallocs.append(n) or real(n, s))
    copies, n0 = hb.htod, len(hb.launches)
    for sorted in (False, True, False):
        assert fp8_mqa_topk(*args, 1024, sorted=sorted, **kw) == outs
    assert not mallocs and hb.htod == copies and len(hb.launches) == n0 + 3 * 5


def test_the_bench_leaves_out_the_named_launches_of_every_group_in_order(hopper):
    # tools/measure/prefill_topk_bench.py --leave-out: what the rest of a fused call costs within the op
    from click.testing import CliRunner
    from tools.measure import prefill_topk_bench as B
    hb, dev = hopper
    inp = testing.prefill_inputs(np.random.default_rng(4), 48, 4096, 64, 128, "causal")
    args = [DeviceArray.from_numpy(a, dev) for a in inp.args()]
    ws = prefill_topk_workspace(48, 4096, 1024, device=dev, H=64, D=128, rows=16)
    idx = DeviceArray.empty((48, 1024), np.int32, dev)
    vals = DeviceArray.empty((48, 1024), np.float32, dev)
    n0 = len(hb.launches)
    fp8_mqa_topk(*args, 1024, workspace=ws, out=(idx, vals), return_values=True)
    every = _symbols(hb, n0)
    assert len(every) == 15 and every[3::5] == ["hx_mqa_topk_wgmma_fold"] * 3  # three groups of five
    n0 = len(hb.launches)
    B._without(dev, args, ws, idx, vals, ())(0)
    assert _symbols(hb, n0) == every
    n0 = len(hb.launches)
    B._without(dev, args, ws, idx, vals, ("sample", "finish"))(0)
    assert _symbols(hb, n0) == [s for i, s in enumerate(every) if i % 5 not in (0, 4)]
    assert B._without(dev, args, prefill_topk_workspace(48, 4096, 1024, device=dev), idx, vals, ()) is None
    for i, name in enumerate(B.LAUNCHES):  # --stages: the first group's launch alone
        n0 = len(hb.launches)
        B._fused_call(dev, args, ws, idx, vals, (name,), first_group_only=True)(0)
        assert _symbols(hb, n0) == [every[i]], name
    for bad, why in (("sample,nope", "nope"), ("filter", "only with the finish")):
        r = CliRunner().invoke(B.main, ["--leave-out", bad])
        assert r.exit_code == 2 and "--leave-out" in r.output and why in r.output, r.output
