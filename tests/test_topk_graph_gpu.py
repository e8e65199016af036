"""Both top-k ops captured once into a CUDA driver graph (their workspaces and outputs made before the capture)
and replayed with new queries, keys and windows or lengths written into the same device arrays: every replay
passes the top-k gate. Skips without a CUDA GPU."""
import numpy as np
import pytest

from hipindexer import fp8_mqa_topk, fp8_paged_mqa_topk, gate, paged_topk_workspace, prefill_topk_workspace, testing
from hipindexer.ops import target_of
from hipindexer.plan import plan_decode, plan_prefill
from hipindexer.runtime import DeviceArray, Stream

pytestmark = pytest.mark.gpu
POISON = np.iinfo(np.int32).min


def _replayed(device, ops, write, judge, steps=3):
    """Capture ops(stream) once; then per step write(step) new inputs, poison, replay, judge(step)."""
    from cuda.bindings import driver as cu
    s = Stream(device)
    write(0)
    ops(s)  # loads the kernels and prepares the launches before the capture
    s.synchronize()
    assert int(cu.cuStreamBeginCapture(s.handle, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)[0]) == 0
    ops(s)
    err, graph = cu.cuStreamEndCapture(s.handle)
    assert int(err) == 0
    err, gexec = cu.cuGraphInstantiate(graph, 0)
    assert int(err) == 0
    try:
        for step in range(1, steps + 1):
            write(step)
            device.synchronize()
            assert int(cu.cuGraphLaunch(gexec, s.handle)[0]) == 0
            s.synchronize()
            judge(step)
    finally:
        cu.cuGraphExecDestroy(gexec)
        cu.cuGraphDestroy(graph)


def _cuda(device):
    if device.backend != "cuda":
        pytest.skip("the driver graph API is exercised on CUDA")


def test_a_graph_replays_the_prefill_top_k_with_new_inputs_and_windows(gpu_device):
    _cuda(gpu_device)
    M, N, H, D, top_k = 96, 5000, 64, 128, 512
    rng = np.random.default_rng(0)
    modes = ("causal", "multi_req", "misaligned", "empty")
    inputs = [testing.prefill_inputs(rng, M, N, H, D, mode) for mode in modes]
    dev = [DeviceArray.from_numpy(a, gpu_device) for a in inputs[0].args()]
    ws = prefill_topk_workspace(M, N, top_k, device=gpu_device, rows=32, chunk=1536)
    outs = (DeviceArray.empty((M, top_k), np.int32, gpu_device), DeviceArray.empty((M, top_k), np.float32, gpu_device))

    def write(step):
        for d, a in zip(dev, inputs[step].args()):
            d.copy_from(a)
        outs[0].fill(POISON)
        outs[1].fill(np.nan)

    def ops(s):
        fp8_mqa_topk(*dev, top_k, relative=True, return_values=True, workspace=ws, out=outs, stream=s)

    def judge(step):
        acc = plan_prefill(M, N, H, D, target_of(gpu_device)).accumulation
        g = gate.gate_prefill_topk(outs[0].numpy(), outs[1].numpy(), inputs[step], top_k, acc, relative=True)
        assert g, f"{modes[step]}: {g.message}"
    _replayed(gpu_device, ops, write, judge)


@pytest.mark.parametrize("fused", [False, True])
def test_a_graph_replays_the_decode_top_k_with_new_lengths(gpu_device, fused):
    _cuda(gpu_device)
    B, n, H, D, bs, top_k = 6, 2, 64, 128, 64, 512
    rng = np.random.default_rng(1)
    case = testing.DecodeCase(B, n, H, D, bs, mean_context=3000, ragged=True, live_min=0, zero_contexts=1)
    first = testing.decode_inputs(rng, case)
    mml = first.max_model_len
    steps = [first]
    for _ in range(3):  # new queries, weights and lengths within the same cache, tables and max_model_len
        ctx = rng.integers(0, first.context_lens.astype(np.int64) + 1).astype(np.int32)  # within each table
        nl = rng.integers(0, n + 1, B).astype(np.int32)
        steps.append(testing.DecodeInputs(testing.random_fp8(rng, first.q.shape), first.kv_cache,
                                          rng.standard_normal(first.weights.shape, dtype=np.float32), ctx,
                                          first.block_tables, mml, nl, False))
    dev = [DeviceArray.from_numpy(a, gpu_device) for a in first.args()[:5]]
    nl_dev = DeviceArray.from_numpy(first.next_n_lens, gpu_device)
    ws = paged_topk_workspace(B, n, top_k, mml, bs, device=gpu_device, **(dict(heads=H, fused=True) if fused else dict(chunk=1024)))
    assert ws.fused == fused
    outs = tuple(DeviceArray.empty((B * n, top_k), dt, gpu_device) for dt in (np.int32, np.float32, np.int32))
    errors = DeviceArray.from_numpy(np.zeros(1, np.int32), gpu_device)

    def write(step):
        inp = steps[step]
        for d, a in zip(dev + [nl_dev], list(inp.args()[:5]) + [inp.next_n_lens]):
            d.copy_from(a)
        outs[0].fill(POISON)
        outs[1].fill(np.nan)
        outs[2].fill(POISON)

    def ops(s):
        fp8_paged_mqa_topk(*dev, mml, top_k, next_n_lens=nl_dev, return_values=True, return_slots=True,
                           workspace=ws, out=outs, errors=errors, stream=s)

    def judge(step):
        acc = plan_decode(B, n, H, D, bs, mml, target_of(gpu_device)).accumulation
        g = gate.gate_paged_topk(outs[0].numpy(), outs[1].numpy(), steps[step], top_k, acc,
                                 slots=outs[2].numpy())
        assert g, g.message
        assert int(errors.numpy()[0]) == 0
    _replayed(gpu_device, ops, write, judge)
