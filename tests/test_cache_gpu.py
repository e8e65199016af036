"""The paged-cache ops on a real GPU: one captured graph (write, gather, windows) replayed with new keys, slots,
block tables and lengths written into the same device arrays, and pools past 4 GiB. Skips without a GPU (or
its memory); tests/emu/cache_cases.py holds the rest, on any device."""
import numpy as np
import pytest

from hipindexer import cache
from hipindexer.check import cache as cache_check
from hipindexer.ops import gather_cached_keys, packed_prefill_windows, quantize_and_cache_keys
from hipindexer.runtime import DeviceArray, Stream

pytestmark = pytest.mark.gpu
D, BS, NB = 128, 16, 40


def _step(rng):
    """One serving step's host values: keys, their slots, three requests' lengths and block tables."""
    lens = (2 * rng.integers(20, 90, 3) + 1).astype(np.int32)
    tables, nb = cache.make_block_tables(lens, BS, rng, max_blocks=12)
    pool = rng.permutation(NB)[:nb]
    tables = np.where(tables < nb, pool[np.minimum(tables, nb - 1)], tables).astype(np.int32)
    slots = np.concatenate([tables[r, np.arange(n) // BS] * BS + np.arange(n) % BS for r, n in enumerate(lens)])
    keys = rng.standard_normal((int(lens.sum()), D), dtype=np.float32) * np.float32(rng.uniform(0.1, 10))
    queries = (lens * rng.uniform(0.2, 1, 3)).astype(np.int32)
    return keys, slots.astype(np.int64), tables, np.concatenate([[0], np.cumsum(lens)]).astype(np.int32), lens, queries


def test_a_driver_graph_replays_the_cache_ops_with_new_device_values(gpu_device):
    if gpu_device.backend != "cuda":
        pytest.skip("the driver graph API is exercised on CUDA")
    from cuda.bindings import driver as cu
    rng = np.random.default_rng(0)
    T, M = 3 * 181, 3 * 181  # the most tokens and rows a step can have; padding slots -1, padding rows empty
    arrays = {"k": (T, D), "slots": (T,), "tables": (3, 12), "cu": (4,), "lens": (3,), "queries": (3,)}
    dtypes = {"k": np.float32, "slots": np.int64}
    dev = {n: DeviceArray.empty(s, dtypes.get(n, np.int32), gpu_device) for n, s in arrays.items()}
    kv = DeviceArray.empty((NB, BS, D + 4), np.uint8, gpu_device).fill(0)
    out = (DeviceArray.empty((T, D), np.uint8, gpu_device), DeviceArray.empty((T,), np.float32, gpu_device))
    win = (DeviceArray.empty((M,), np.int32, gpu_device), DeviceArray.empty((M,), np.int32, gpu_device))
    errors = DeviceArray.from_numpy(np.zeros(1, np.int32), gpu_device)
    s = Stream(gpu_device)

    def ops():
        quantize_and_cache_keys(dev["k"], kv, dev["slots"], preshuffle=True, errors=errors, stream=s)
        gather_cached_keys(kv, dev["tables"], dev["cu"], preshuffle=True, out=out, errors=errors, stream=s)
        packed_prefill_windows(dev["queries"], dev["lens"], out=win, errors=errors, stream=s)

    def write(step):
        keys, slots, tables, cuv, lens, queries = step
        padded_k = np.zeros((T, D), np.float32)
        padded_k[:len(keys)] = keys
        padded_s = np.full(T, -1, np.int64)
        padded_s[:len(slots)] = slots
        for name, v in (("k", padded_k), ("slots", padded_s), ("tables", tables), ("cu", cuv), ("lens", lens),
                        ("queries", queries)):
            dev[name].copy_from(DeviceArray.from_numpy(np.ascontiguousarray(v), gpu_device))
        gpu_device.synchronize()

    write(_step(rng))
    ops()  # loads the kernels and prepares the launches before the capture
    s.synchronize()
    mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    assert int(cu.cuStreamBeginCapture(s.handle, mode)[0]) == 0
    ops()
    err, graph = cu.cuStreamEndCapture(s.handle)
    assert int(err) == 0
    err, gexec = cu.cuGraphInstantiate(graph, 0)
    assert int(err) == 0
    try:
        for _ in range(3):
            step = _step(rng)
            keys, slots, tables, cuv, lens, queries = step
            write(step)
            kv.fill(0)
            gpu_device.synchronize()
            assert int(cu.cuGraphLaunch(gexec, s.handle)[0]) == 0
            s.synchronize()
            want = cache.new_cache(NB, BS, D)
            cache.write_cache(want, *cache.quantize_keys(keys), slots, preshuffle=True)
            np.testing.assert_array_equal(kv.numpy(), want)
            wk = np.concatenate([cache.gather_keys(want, tables[r], int(lens[r]), D, True)[0] for r in range(3)])
            np.testing.assert_array_equal(out[0].numpy()[:len(wk)], wk.view(np.uint8))
            ks, ke = cache.packed_prefill_windows(queries, lens, M)
            np.testing.assert_array_equal(win[0].numpy(), ks)
            np.testing.assert_array_equal(win[1].numpy(), ke)
        assert int(errors.numpy()[0]) == 0
    finally:
        cu.cuGraphExecDestroy(gexec)
        cu.cuGraphDestroy(graph)


@pytest.mark.parametrize("block_size,base", cache_check.OFFSET_CASES, ids=lambda v: str(v))
def test_pools_past_4_gib_are_addressed_in_64_bits(gpu_device, block_size, base):
    o = cache_check.offset_case(np.random.default_rng(1), gpu_device, block_size, base)
    if o.status == "not applicable":
        pytest.skip(o.message)
    assert o.status == "passed", o.message
