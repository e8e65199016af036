"""The decode op on a real GPU: a captured graph replayed with new lengths, live rows and block tables
written into the same device arrays, and caches past 4 GiB. Skips without a GPU (or its memory)."""
import numpy as np
import pytest

from hipindexer import fp8_paged_mqa_logits, testing
from hipindexer.check import sweep
from hipindexer.plan import plan_decode
from hipindexer.gate import gate_decode
from hipindexer.ops import target_of
from hipindexer.runtime import DeviceArray, Stream

pytestmark = pytest.mark.gpu
# key_codes: every token slot of the pool holds a key and a scale, read by whichever table names it. H = 64,
# D = 128, block_size 64: on sm_90a the planner's default is the tensor-core kernel.
CASE = testing.DecodeCase(8, 4, 64, 128, 64, False, mean_context=3000, spread="equal", ragged=True, live_min=1,
                          key_codes=True)


def _steps(device):
    """Step 1's inputs on the device, and step 2's: new context lengths (one padding sequence), next_n_lens
    and block tables over the same pool, new queries and weights, all the same shapes."""
    rng = np.random.default_rng(0)
    one = testing.decode_inputs(rng, CASE)
    nb, width = one.kv_cache.shape[0], one.block_tables.shape[1]
    ctx = rng.integers(1, CASE.mean_context + 1, size=CASE.B).astype(np.int32)
    ctx[3] = 0
    nl = rng.integers(0, CASE.next_n + 1, size=CASE.B).astype(np.int32)
    bt = np.full((CASE.B, width), np.iinfo(np.int32).max, np.int32)
    pool = rng.permutation(nb).astype(np.int32)
    for b, c in enumerate(ctx):
        need = -(-int(c) // CASE.block_size)
        bt[b, :need], pool = pool[:need], pool[need:]
    two = testing.DecodeInputs(testing.random_fp8(rng, one.q.shape), one.kv_cache,
                               rng.standard_normal(one.weights.shape, dtype=np.float32), ctx, bt,
                               one.max_model_len, nl, False)
    dev = [DeviceArray.from_numpy(a, device) if isinstance(a, np.ndarray) else a for a in one.args()]
    return one, two, testing.DecodeInputs(*dev)


def _write_step(on_device, inp):
    for name in ("q", "weights", "context_lens", "block_tables", "next_n_lens"):
        getattr(on_device, name).copy_from(getattr(inp, name))


def _check(out, inp, device):
    """The gate at the accumulation class of the kernel the planner ran."""
    plan = plan_decode(CASE.B, CASE.next_n, CASE.H, CASE.D, CASE.block_size, inp.max_model_len, target_of(device))
    g = gate_decode(out.numpy(), inp, True, plan.accumulation)
    assert g, f"{plan.kernel}: {g.message}"


def test_a_torch_cuda_graph_replays_with_new_lengths_and_tables(gpu_device):
    torch = pytest.importorskip("torch")
    if gpu_device.backend != "cuda" or not torch.cuda.is_available():
        pytest.skip("torch CUDA graphs need a CUDA device")
    one, two, d = _steps(gpu_device)
    out = DeviceArray.empty((CASE.B * CASE.next_n, one.max_model_len), np.float32, gpu_device)
    errors = DeviceArray.from_numpy(np.zeros(1, np.int32), gpu_device)
    s = torch.cuda.Stream()
    ours = Stream(gpu_device, external=s.cuda_stream)
    gpu_device.synchronize()
    fp8_paged_mqa_logits(*d.args(), errors=errors, out=out, stream=ours)  # loads the kernel before capture
    ours.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        fp8_paged_mqa_logits(*d.args(), errors=errors, out=out, stream=ours)
    _write_step(d, two)
    gpu_device.synchronize()
    out.fill(np.nan)
    gpu_device.synchronize()
    g.replay()
    torch.cuda.synchronize()
    _check(out, two, gpu_device)
    _write_step(d, one)
    gpu_device.synchronize()
    g.replay()
    torch.cuda.synchronize()
    _check(out, one, gpu_device)
    assert int(errors.numpy()[0]) == 0


def test_a_driver_graph_replays_with_new_lengths_and_tables(gpu_device):
    if gpu_device.backend != "cuda":
        pytest.skip("the driver graph API is exercised on CUDA")
    from cuda.bindings import driver as cu
    one, two, d = _steps(gpu_device)
    out = DeviceArray.empty((CASE.B * CASE.next_n, one.max_model_len), np.float32, gpu_device)
    s = Stream(gpu_device)
    gpu_device.synchronize()
    fp8_paged_mqa_logits(*d.args(), out=out, stream=s)
    s.synchronize()
    mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    assert int(cu.cuStreamBeginCapture(s.handle, mode)[0]) == 0
    fp8_paged_mqa_logits(*d.args(), out=out, stream=s)
    err, graph = cu.cuStreamEndCapture(s.handle)
    assert int(err) == 0
    err, gexec = cu.cuGraphInstantiate(graph, 0)
    assert int(err) == 0
    try:
        for step in (two, one):
            _write_step(d, step)
            out.fill(np.nan)
            gpu_device.synchronize()
            assert int(cu.cuGraphLaunch(gexec, s.handle)[0]) == 0
            s.synchronize()
            _check(out, step, gpu_device)
    finally:
        cu.cuGraphExecDestroy(gexec)
        cu.cuGraphDestroy(graph)


@pytest.mark.parametrize("block_size,base", sweep.OFFSET_CASES, ids=lambda v: str(v))
def test_a_cache_past_4_gib_is_addressed_in_64_bits(gpu_device, block_size, base):
    o = sweep.decode_offset_case(np.random.default_rng(1), gpu_device, block_size, base)
    if o.status == sweep.NA:
        pytest.skip(o.message)
    assert o.status == sweep.PASS, o.message


# The generic kernel's shape, then the sm_90a tensor-core kernel's at both block sizes (the generic kernel
# elsewhere).
@pytest.mark.parametrize("H,D,bs", [(16, 64, 16), (64, 128, 16), (32, 128, 64)], ids=lambda v: str(v))
def test_device_values_out_of_range_are_never_read_through(gpu_device, H, D, bs):
    o = sweep.decode_untrusted_values(np.random.default_rng(2), gpu_device, heads=(H,), dims=(D,), block_sizes=(bs,))
    assert o.status == sweep.PASS, o.message


def _dealing_plan(device, case):
    """The plan of a call that deals its whole tail (the default deals nothing); a skip where the planner's kernel
    for the case cannot deal (not the sm_90a tensor-copy kernel)."""
    try:
        return plan_decode(case.B, case.next_n, case.H, case.D, case.block_size, case.mean_context * 2,
                           target_of(device), preshuffle=case.preshuffle, deal_share=1024)
    except ValueError as e:
        if "does not deal" not in str(e):
            raise
        pytest.skip(str(e))


def _on_device(inp, device):
    return testing.DecodeInputs(*[DeviceArray.from_numpy(a, device) if isinstance(a, np.ndarray) else a
                                  for a in inp.args()])


def _gated_call(device, inp, plan, stream=None, **deal):
    """One call on device-resident inputs into a NaN-poisoned output, for _gate_out once the stream is done."""
    out = DeviceArray.from_numpy(np.full((len(inp.weights), inp.max_model_len), np.nan, np.float32), device, stream)
    fp8_paged_mqa_logits(*_on_device(inp, device).args(), out=out, stream=stream, **deal)
    return out


def _gate_out(out, inp, plan):
    g = gate_decode(out.numpy(), inp, True, plan.accumulation)
    assert g, f"{plan.kernel}: {g.message}"


@pytest.mark.parametrize("block_size,preshuffle,grain", [(64, False, 1), (16, True, 8), (64, True, 64)],
                         ids=lambda v: str(v))
def test_a_tail_dealt_in_small_chunks_is_computed_whole_call_after_call(gpu_device, block_size, preshuffle, grain):
    """All of a ragged batch's work dealt (deal_share 1024) in chunks of a few blocks, so every unit claims many:
    three calls on fresh inputs each pass the gate. A claim pair left past zero by one call would leave the next
    call's tail unwritten (NaN); a chunk handed to two units or to none, wrong or NaN columns. The last call's bits
    equal those of a call that deals nothing."""
    case = testing.DecodeCase(24, 2, 64, 128, block_size, preshuffle, mean_context=4000, ragged=True, key_codes=True)
    plan = _dealing_plan(gpu_device, case)
    rng = np.random.default_rng(3)
    for _ in range(3):
        inp = testing.decode_inputs(rng, case)
        out = _gated_call(gpu_device, inp, plan, deal_share=1024, deal_grain=grain)
        _gate_out(out, inp, plan)
    static = _gated_call(gpu_device, inp, plan, deal_share=0)
    assert np.array_equal(out.numpy().view(np.uint32), static.numpy().view(np.uint32)), \
        "the same bits whoever computes a block"


def test_calls_on_two_streams_at_once_deal_their_own_tails(gpu_device):
    """Calls queued on two streams without waiting for each other (so their launches may overlap) count their
    claims in their streams' own pairs: every output passes the gate."""
    case = testing.DecodeCase(32, 1, 64, 128, 64, False, mean_context=6000, spread="equal", key_codes=True)
    plan = _dealing_plan(gpu_device, case)
    rng = np.random.default_rng(4)
    streams = [Stream(gpu_device), Stream(gpu_device)]
    calls = [(testing.decode_inputs(rng, case), s) for _ in range(3) for s in streams]
    ready = [(_on_device(inp, gpu_device), s) for inp, s in calls]
    outs = [DeviceArray.from_numpy(np.full((len(inp.weights), inp.max_model_len), np.nan, np.float32), gpu_device)
            for inp, _ in calls]
    gpu_device.synchronize()
    for (d, s), out in zip(ready, outs):
        fp8_paged_mqa_logits(*d.args(), out=out, stream=s, deal_share=512, deal_grain=16)
    gpu_device.synchronize()
    for out, (inp, _) in zip(outs, calls):
        _gate_out(out, inp, plan)
