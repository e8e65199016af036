"""The prefill op's host side over a host-memory backend that runs no kernel: every check happens
before anything is copied to the device, and each launch sends what its call asked for."""
import numpy as np
import pytest

from hipindexer import catalog, fp8_mqa_logits, testing
from hipindexer.runtime import DeviceArray
from hipindexer.runtime.module import load_manifest
from host_backend import HostBackend, registered

PREFILL = catalog.STRUCT["PrefillParams"]


@pytest.fixture
def hopper():
    """(backend, device): an sm_90a device over host memory, with the built sm_90a kernels' manifest."""
    try:
        load_manifest()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    hb = HostBackend(name="hosthopper", arch="sm_90a", num_cus=132, wave_size=32)
    with registered(hb) as dev:
        yield hb, dev


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
