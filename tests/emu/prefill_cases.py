"""The prefill op on the emulated MI355X (run by tests/test_prefill_emu.py in a child
pytest with -p emu_session, whose HIP is the emulator)."""
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from built_kernels import manifest_of_test_kernels
from hipindexer import fp8_mqa_logits, reference, testing
from hipindexer.gate import gate_prefill
from hipindexer.ops import target_of
from hipindexer.plan import plan_prefill
from hipindexer.runtime import Device, DeviceArray, get_kernel

DEV = Device("emu:gfx950")
EDGE = st.one_of(st.integers(-2**31, 2**31 - 1), st.integers(-5, 700))


@settings(deadline=None, derandomize=True, max_examples=60)
@given(st.integers(1, 70), st.integers(1, 700), st.data())
def test_every_column_of_every_row_has_exactly_one_owner(M, N, data):
    """The in-kernel ownership arithmetic (index_math.h) run through the emulator, not a Python copy."""
    ks = np.array(data.draw(st.lists(EDGE, min_size=M, max_size=M)), np.int32)
    ke = np.array(data.draw(st.lists(EDGE, min_size=M, max_size=M)), np.int32)
    rpb = data.draw(st.integers(1, 64))
    plan0 = plan_prefill(M, N, 16, 64, target_of(DEV), rows_per_block=rpb)
    split = data.draw(st.integers(1, -(-N // plan0.tile)))
    plan = plan_prefill(M, N, 16, 64, target_of(DEV), rows_per_block=rpb, split=split,
                        reverse_rows=data.draw(st.booleans()))
    owner = DeviceArray.empty((plan.split, M, N), np.int32, DEV).fill(0)
    kern = get_kernel("split_probe", device=DEV, manifest=manifest_of_test_kernels())
    kern.launch(plan.grid, ks=DeviceArray.from_numpy(ks, DEV), ke=DeviceArray.from_numpy(ke, DEV), owner=owner,
                M=M, N=N, rows_per_block=plan.rows_per_block, split=plan.split, tile=plan.tile,
                reverse_rows=int(plan.reverse_rows))
    got = owner.numpy()
    assert ((got > 0).sum(axis=0) == 1).all(), "a column owned by no part or by two"
    computed = got.max(axis=0) == 2
    valid = reference.valid_mask(ks, ke, N)
    assert (computed | ~valid).all(), "a valid position only filled, never computed"


def _inputs(M=37, N=300, H=16, D=64, mode="multi_req", seed=0):
    return testing.prefill_inputs(np.random.default_rng(seed), M, N, H, D, mode)


def test_out_with_a_wider_row_stride_keeps_its_padding():
    inp = _inputs()
    wide = DeviceArray.empty((37, 300 + 9), np.float32, DEV).fill(np.nan)
    out = wide[:, :300]
    fp8_mqa_logits(*inp.args(), out=out, device=DEV)
    got = wide.numpy()
    assert np.isnan(got[:, 300:]).all()
    g = gate_prefill(got[:, :300], inp, True, "fp32")
    assert g, g.message


def test_numpy_device_and_uint8_inputs_give_the_same_logits():
    inp = _inputs(seed=1)
    a = fp8_mqa_logits(*inp.args(), device=DEV).numpy()
    dev_args = [DeviceArray.from_numpy(x, DEV) for x in inp.args()]
    b = fp8_mqa_logits(*dev_args).numpy()
    c = fp8_mqa_logits(inp.q.view(np.uint8), inp.k.view(np.uint8), *inp.args()[2:], device=DEV).numpy()
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)


def test_clean_false_writes_only_inside_the_windows():
    inp = _inputs(mode="past_end", seed=2)
    out = DeviceArray.empty((37, 300), np.float32, DEV).fill(np.nan)
    got = fp8_mqa_logits(*inp.args(), clean_logits=False, out=out).numpy()
    valid = reference.valid_mask(inp.cu_seqlen_ks, inp.cu_seqlen_ke, 300)
    assert np.isnan(got[~valid]).all() and not np.isnan(got[valid]).any()


@pytest.mark.parametrize("kw,exc,match", [
    (dict(split=0), ValueError, r"split: expected an int in \[1, 2\]"),
    (dict(rows_per_block=100), ValueError, "rows_per_block"),
    (dict(kernel="nope"), ValueError, "kernel: 'nope'"),
    (dict(tile=4), TypeError, r"unknown tunable\(s\) \['tile'\]"),
])
def test_forced_tunables_are_checked_before_any_launch(kw, exc, match):
    inp = _inputs()
    with pytest.raises(exc, match=match):
        fp8_mqa_logits(*inp.args(), device=DEV, **kw)


@pytest.mark.parametrize("arg,bad,exc,match", [
    (0, lambda i: i.q.astype(np.float32), TypeError, "q: expected dtype float8_e4m3fn"),
    (1, lambda i: i.k[:, :32], ValueError, r"k: D \(last dim\) is 32, but q gives 64"),
    (3, lambda i: i.weights[:, :3], ValueError, r"weights: H \(last dim\) is 3"),
    (4, lambda i: i.cu_seqlen_ks[:5], ValueError, "cu_seqlen_ks: length is 5"),
])
def test_bad_input_is_named_before_any_launch(arg, bad, exc, match):
    inp = _inputs()
    args = list(inp.args())
    args[arg] = bad(inp)
    with pytest.raises(exc, match=match):
        fp8_mqa_logits(*args, device=DEV)


def test_a_made_up_stream_handle_is_refused_and_the_named_ones_work():
    inp = _inputs(seed=3)
    with pytest.raises(TypeError, match=r"Stream\(device, external=5\)"):
        fp8_mqa_logits(*inp.args(), device=DEV, stream=5)
    a = fp8_mqa_logits(*inp.args(), device=DEV).numpy()
    b = fp8_mqa_logits(*inp.args(), device=DEV, stream=0).numpy()
    np.testing.assert_array_equal(a, b)


class _Fp8Tensor:
    """A stand-in for a PyTorch float8_e4m3fn tensor on the device: its CUDA Array Interface and DLPack
    raise, and view(<its framework's uint8>) gives the same bytes as an exporting array."""
    __module__ = "fakeframework"
    dtype = "fakeframework.float8_e4m3fn"

    def __init__(self, base):
        self.base = base

    @property
    def __cuda_array_interface__(self):
        raise TypeError("float8_e4m3fn is not supported by __cuda_array_interface__")

    def __dlpack_device__(self):
        return self.base.__dlpack_device__()

    def __dlpack__(self, **kw):
        raise BufferError("float8_e4m3fn is not supported by DLPack")

    def view(self, dtype):
        assert dtype is sys.modules["fakeframework"].uint8
        return self.base.view(np.uint8)


def test_an_fp8_tensor_that_refuses_both_protocols_passes_straight_in(monkeypatch):
    import types
    monkeypatch.setitem(sys.modules, "fakeframework", types.SimpleNamespace(uint8=object()))
    inp = _inputs(seed=4)
    q, k = DeviceArray.from_numpy(inp.q, DEV), DeviceArray.from_numpy(inp.k, DEV)
    want = fp8_mqa_logits(q, k, *inp.args()[2:], device=DEV).numpy()
    got = fp8_mqa_logits(_Fp8Tensor(q), _Fp8Tensor(k), *inp.args()[2:], device=DEV).numpy()
    np.testing.assert_array_equal(got, want)


def test_threads_launching_at_once_each_get_their_own_logits():
    """Each thread calls the op on inputs of its own (two shapes, so the plans differ too) while the
    interpreter switches threads as often as it can: every result must be its own inputs' logits."""
    import threading
    shapes = [(37, 300), (20, 150)]
    sets = [_inputs(*shapes[t % 2], seed=10 + t) for t in range(4)]
    want = [fp8_mqa_logits(*inp.args(), device=DEV).numpy() for inp in sets]
    for inp, w in zip(sets, want):
        g = gate_prefill(w, inp, True, "fp32")
        assert g, g.message
    args = [[DeviceArray.from_numpy(a, DEV) for a in inp.args()] for inp in sets]
    outs = [DeviceArray.empty(w.shape, np.float32, DEV) for w in want]
    start, wrong = threading.Barrier(len(sets)), []

    def worker(t):
        start.wait()
        for i in range(12):
            outs[t].fill(np.nan)
            got = fp8_mqa_logits(*args[t], out=outs[t]).numpy()
            if not np.array_equal(got, want[t]):
                wrong.append((t, i))
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(len(sets))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(interval)
    assert not wrong, f"(thread, call) pairs whose logits were not their own: {wrong}"


def test_out_must_be_a_device_array_of_the_right_shape():
    inp = _inputs()
    with pytest.raises(TypeError, match="out: expected a device array"):
        fp8_mqa_logits(*inp.args(), out=np.zeros((37, 300), np.float32), device=DEV)
    with pytest.raises(ValueError, match=r"out: expected a float32 \[M=37, N=300\]"):
        fp8_mqa_logits(*inp.args(), out=DeviceArray.empty((37, 299), np.float32, DEV), device=DEV)


def test_a_strided_input_is_refused():
    inp = _inputs()
    w = DeviceArray.from_numpy(np.concatenate([inp.weights, inp.weights], axis=1), DEV)[:, :16]
    with pytest.raises(ValueError, match="weights: expected a C-contiguous array"):
        fp8_mqa_logits(inp.q, inp.k, inp.kv_scale, w, inp.cu_seqlen_ks, inp.cu_seqlen_ke, device=DEV)


def test_empty_shapes_launch_nothing():
    inp = _inputs(M=0, N=10, mode="causal")
    assert fp8_mqa_logits(*inp.args(), device=DEV).shape == (0, 10)
