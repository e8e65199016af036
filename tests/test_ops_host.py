"""The prefill op's host side over a host-memory backend that runs no kernel: every check happens
before anything is copied to the device, and each launch sends what its call asked for."""
import numpy as np
import pytest

from hipindexer import catalog, fp8_mqa_logits, testing
from hipindexer.runtime import DeviceArray

PREFILL = catalog.STRUCT["PrefillParams"]



def _inputs(M=24, N=300, H=64, D=128, seed=0):
    return testing.prefill_inputs(np.random.default_rng(seed), M, N, H, D, "multi_req")


def sent(hb):
    """The PrefillParams fields of the backend's last launch."""
    raw = PREFILL.ctype().from_buffer_copy(hb.launches[-1][4])
    return {f: getattr(raw, f) for f, _ in PREFILL.fields}


@pytest.mark.parametrize("bad,exc,match", [
    (dict(q=lambda i: i.q.astype(np.float32)), TypeError, "q: expected dtype float8_e4m3fn"),
    (dict(k=lambda i: i.k[:, :64]), ValueError, r"k: D \(last dim\) is 64, but q gives 128"),
    (dict(kv_scale=lambda i: i.kv_scale.astype(np.float64)), TypeError, "kv_scale: expected dtype float32"),
    (dict(weights=lambda i: i.weights[:, :3]), ValueError, r"weights: H \(last dim\) is 3"),
    (dict(cu_seqlen_ke=lambda i: i.cu_seqlen_ke[:5]), ValueError, "cu_seqlen_ke: length is 5"),
    (dict(out=lambda i: np.zeros((24, 300), np.float32)), TypeError, "out: expected a device array"),
    (dict(accumulation=lambda i: "exact"), ValueError, "accumulation: expected one of"),
    (dict(split=lambda i: 0), ValueError, r"split: expected an int in \[1, "),
    (dict(kernel=lambda i: "nope"), ValueError, "kernel: 'nope' is not a prefill kernel for sm_90a"),
    (dict(rows_per_block=lambda i: 3), ValueError, "rows_per_block: mqa_logits_wgmma_fold holds exactly 4"),
    (dict(tile=lambda i: 4), TypeError, r"unknown tunable\(s\) \['tile'\]"),
    (dict(stream=lambda i: 5), TypeError, r"Stream\(device, external=5\)"),
])
def test_every_check_runs_before_anything_is_copied(hopper, bad, exc, match):
    hb, dev = hopper
    inp = _inputs()
    kw = dict(zip(("q", "k", "kv_scale", "weights", "cu_seqlen_ks", "cu_seqlen_ke"), inp.args()))
    kw.update({name: make(inp) for name, make in bad.items()})
    with pytest.raises(exc, match=match):
        fp8_mqa_logits(**kw, device=dev)
    assert hb.htod == 0 and not hb.launches


def test_an_empty_call_still_checks_its_options(hopper):
    hb, dev = hopper
    inp = _inputs(M=0)
    with pytest.raises(ValueError, match="accumulation: expected one of"):
        fp8_mqa_logits(*inp.args(), accumulation="exact", device=dev)
    assert fp8_mqa_logits(*inp.args(), device=dev).shape == (0, 300) and hb.htod == 0 and not hb.launches


def test_a_launch_sends_its_own_arguments(hopper):
    hb, dev = hopper
    inp = _inputs()
    fp8_mqa_logits(*inp.args(), device=dev, clean_logits=False)
    assert hb.htod == 6 and len(hb.launches) == 1
    got = sent(hb)
    assert (got["M"], got["N"], got["H"], got["D"], got["clean"], got["out_stride"]) == (24, 300, 64, 128, 0, 300)
    args = [DeviceArray.from_numpy(a, dev) for a in inp.args()]
    wide = DeviceArray.empty((24, 310), np.float32, dev)
    fp8_mqa_logits(*args, out=wide[:, :300])
    got = sent(hb)
    assert [got[f] for f in ("q", "k", "kv_scale", "weights", "ks", "ke", "out")] == [a.ptr for a in args] + [wide.ptr]
    assert got["clean"] == 1 and got["out_stride"] == 310


def _resident(dev, inp):
    return [DeviceArray.from_numpy(a, dev) for a in inp.args()]


def test_a_repeated_call_reuses_its_prepared_launch_without_checking_or_planning_again(hopper, monkeypatch):
    from hipindexer.ops import prefill as ops
    hb, dev = hopper
    args = _resident(dev, _inputs())
    out = DeviceArray.empty((24, 300), np.float32, dev)
    fp8_mqa_logits(*args, out=out)
    for name in ("prefill_shape", "plan_prefill", "kernel_for", "adopt"):
        monkeypatch.setattr(ops, name, lambda *a, **k: pytest.fail("a prepared call checked or planned again"))
    other = _resident(dev, _inputs(seed=1))
    out2 = DeviceArray.empty((24, 300), np.float32, dev)
    fp8_mqa_logits(*other, out=out2)
    got = sent(hb)
    assert [got[f] for f in ("q", "k", "kv_scale", "weights", "ks", "ke", "out")] == \
        [a.ptr for a in other] + [out2.ptr], "the pointers of this call, not of the first"


@pytest.mark.parametrize("first,second,field,values", [
    (dict(), dict(clean_logits=False), "clean", (1, 0)),
    (dict(split=1), dict(split=2), "split", (1, 2)),
    (dict(reverse_rows=False), dict(reverse_rows=True), "reverse_rows", (0, 1)),
])
def test_a_call_with_other_options_gets_a_launch_of_its_own(hopper, first, second, field, values):
    hb, dev = hopper
    args = _resident(dev, _inputs())
    out = DeviceArray.empty((24, 300), np.float32, dev)
    for kw, want in ((first, values[0]), (second, values[1]), (first, values[0])):
        fp8_mqa_logits(*args, out=out, **kw)
        assert sent(hb)[field] == want, (kw, field)


def test_shapes_strides_and_accumulation_each_key_their_launch(hopper):
    hb, dev = hopper
    small, big = _resident(dev, _inputs(M=8, N=100)), _resident(dev, _inputs(M=24, N=300))
    wide = DeviceArray.empty((24, 320), np.float32, dev)
    calls = [(small, DeviceArray.empty((8, 100), np.float32, dev), {}, (8, 100, 100), "hx_mqa_logits_wgmma_fold"),
             (big, wide[:, :300], {}, (24, 300, 320), "hx_mqa_logits_wgmma_fold"),
             (big, DeviceArray.empty((24, 300), np.float32, dev), {}, (24, 300, 300), "hx_mqa_logits_wgmma_fold"),
             (big, wide[:, :300], {"accumulation": "fp32"}, (24, 300, 320), "hx_mqa_logits_generic")]
    for _ in range(2):
        for args, out, kw, (M, N, stride), symbol in calls:
            fp8_mqa_logits(*args, out=out, **kw)
            got = sent(hb)
            assert (got["M"], got["N"], got["out_stride"], got["out"]) == (M, N, stride, out.ptr)
            assert hb.launches[-1][0] == symbol


def test_a_prepared_call_still_refuses_a_misaligned_pointer_and_allocates_a_missing_out(hopper):
    hb, dev = hopper
    inp = _inputs()
    args = _resident(dev, inp)
    first = fp8_mqa_logits(*args)
    second = fp8_mqa_logits(*args)
    assert first.shape == second.shape == (24, 300) and first.ptr != second.ptr and sent(hb)["out"] == second.ptr
    padded = DeviceArray.from_numpy(np.concatenate([inp.k.view(np.uint8).ravel(), np.zeros(16, np.uint8)]), dev)
    for offset in (16, 8):
        k = DeviceArray(padded.ptr + offset, inp.k.shape, inp.k.dtype, dev, owner=padded)
        if offset == 16:
            fp8_mqa_logits(args[0], k, *args[2:])
        else:
            with pytest.raises(ValueError, match="k: .* must be 16-byte aligned"):
                fp8_mqa_logits(args[0], k, *args[2:])


def test_the_benchmark_reports_host_microseconds_per_call(hopper, monkeypatch):
    from hipindexer.bench import prefill as bench
    hb, dev = hopper
    monkeypatch.setitem(bench.L2_BYTES, "sm_90a", 1 << 20)  # a few input sets, not the H200's 60 MiB worth
    r = bench.bench_prefill(dev, 16, 256, 64, 128, repeats=2)
    assert r["host_us"] > 0 and r["kernel"] == "mqa_logits_wgmma_fold" and len(hb.launches) > 50


@pytest.mark.parametrize("shape,dtype", [((2,), np.int32), ((1, 1), np.int32), ((0,), np.int32), ((), np.int32),
                                         ((1,), np.int64), ((1,), np.uint32)])
def test_errors_must_be_exactly_an_int32_array_of_one_element_for_every_op(hopper, shape, dtype):
    """The kernels OR bits into errors[0] only: a longer array would promise flags that never come."""
    from hipindexer import (fp8_paged_mqa_logits, gather_cached_keys, packed_prefill_windows,
                            quantize_and_cache_keys)
    from hipindexer import cache as hcache
    hb, dev = hopper
    bad = DeviceArray.empty(shape, dtype, dev)
    dec = testing.decode_inputs(np.random.default_rng(0), testing.DecodeCase(2, 2, 16, 64, 16, mean_context=100))
    kv = DeviceArray.from_numpy(hcache.new_cache(2, 16, 64), dev)
    calls = {
        "fp8_paged_mqa_logits": lambda: fp8_paged_mqa_logits(*dec.args(), errors=bad, device=dev),
        "quantize_and_cache_keys": lambda: quantize_and_cache_keys(np.ones((4, 64), np.float32), kv,
                                                                   np.arange(4, dtype=np.int64), errors=bad),
        "gather_cached_keys": lambda: gather_cached_keys(kv, np.array([[0, 1]], np.int32),
                                                         np.array([0, 20], np.int32), errors=bad),
        "packed_prefill_windows": lambda: packed_prefill_windows(np.array([3], np.int32), np.array([5], np.int32),
                                                                 errors=bad, device=dev),
    }
    for call in calls.values():
        with pytest.raises(ValueError, match=r"errors: expected a writable int32 \[1\] device array"):
            call()
    assert not hb.launches
    good = DeviceArray.from_numpy(np.zeros(1, np.int32), dev)
    fp8_paged_mqa_logits(*dec.args(), errors=good, device=dev)
    assert len(hb.launches) == 1


def test_an_array_allocated_on_a_foreign_stream_keeps_that_stream_alive(hopper):
    # A framework destroys its stream when the stream's object goes; the array's stream-ordered free comes later
    # and must never name a destroyed stream (on CUDA that crashes the process).
    import gc
    import weakref
    from hipindexer.runtime import Stream
    hb, dev = hopper

    class ForeignStream:
        def __cuda_stream__(self):
            return (0, int(dev.default_stream))

    foreign = ForeignStream()
    alive = weakref.ref(foreign)
    out = fp8_mqa_logits(*_inputs().args(), stream=foreign, device=dev)
    del foreign
    gc.collect()
    assert alive() is not None, "the foreign stream's object went while an array allocated on it lives"
    del out
    gc.collect()
    assert alive() is None, "the foreign stream's object is kept past its last array"
    assert Stream(dev, external=int(dev.default_stream))._foreign is None  # a bare handle holds nothing


def test_a_prepared_launch_key_tells_a_flag_from_the_int_equal_to_it():
    """1 == True and hash(1) == hash(True): the key holds the options' types, so a call passing 1 for a flag (or
    a tunable) misses the launch a call with True prepared and meets the full path's type check."""
    from hipindexer.ops.launch import resident_key
    assert resident_key((), True, ("held", True)) != resident_key((), 1, ("held", True))
    assert resident_key((), True, ("held", True)) != resident_key((), True, ("held", 1))
    assert resident_key((), True, ("held", True)) == resident_key((), True, ("held", True))
