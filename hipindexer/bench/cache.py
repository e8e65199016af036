"""The paged-cache benchmark (`hipindexer bench cache`), by the method of docs/benchmarks.md.

Rows (D = 128, block_size 64, keys bfloat16 as vLLM's indexer passes them, each cache layout):
  write        T = 65536 keys quantised into a pool of exactly T slots, at a random permutation of it,
               with power-of-two scales (vLLM's ue8m0) and with amax / 448 scales;
  gather       131072 tokens of 64 requests (odd lengths near 2048) through random block tables;
  decode_step  T = 64 keys, one per sequence, at random slots of a pool of 64 x 2048 tokens: the write
               one decode step makes, where launch latency is the cost.
Inputs and outputs are rotated over enough sets to cover 3x the L2 (the decode step's pool is one);
device time is the median of back-to-back calls between events and, on CUDA, of a captured graph's
replays; host microseconds per call are measured with every input already on the device.

Bytes are the fewest the op must move, read + written: write reads the keys and the slots and writes
D + 4 bytes per token; gather reads and writes D + 4 bytes per token (plus the block-table entries and
cu_seq_lens it reads). The fraction is of the copy kernel's read + write bandwidth in the same run.
On the emulator the sizes are tiny and the times measure the CPU, not a GPU.
"""
from __future__ import annotations

import statistics

import ml_dtypes
import numpy as np

from .. import cache
from ..ops import gather_cached_keys, quantize_and_cache_keys
from ..runtime import DeviceArray
from .timing import L2_BYTES, emulated, figure, host_us_per_call, time_batches, time_graph

D, BLOCK_SIZE = 128, 64
KEY_DTYPE = np.dtype(ml_dtypes.bfloat16)
WRITE_T, GATHER_R, GATHER_MEAN, STEP_T, STEP_POOL = 65536, 64, 2048, 64, 64 * 2048
EMULATOR = {"write_t": 512, "gather_r": 4, "gather_mean": 64, "step_pool": 64 * 64}


def _timed(device, call, nbytes: int, repeats: int, **row) -> dict:
    """Time call(i, stream=None) back to back and by graph replay; the row with its figures."""
    times, calls, once = time_batches(device, call, repeats)
    us = statistics.median(times)
    graph = time_graph(device, call, calls, repeats)
    return {**row, "bytes": nbytes, "us": us, "us_min": min(times),
            "us_graph": statistics.median(graph) if graph else None, "GBps": nbytes / (us * 1e-6) / 1e9,
            "host_us": host_us_per_call(device, call, calls=max(5, min(200, int(0.5 / once))))}


def _sets(device, per_set: int) -> int:
    return max(1, -(-3 * L2_BYTES.get(device.arch, 64 << 20) // per_set))


def bench_write(device, T: int, pool: int, preshuffle: bool, power_of_two: bool = True, repeats: int = 10,
                op: str = "write") -> dict:
    """quantize_and_cache_keys of T bfloat16 keys at random slots of a pool of `pool` slots (power_of_two:
    vLLM's ue8m0 scales, where each value is multiplied by the exact reciprocal instead of divided)."""
    rng = np.random.default_rng(0)
    nb = -(-pool // BLOCK_SIZE)
    k = (rng.standard_normal((T, D), dtype=np.float32)).astype(KEY_DTYPE)
    per_set = k.nbytes + 8 * T + (nb * BLOCK_SIZE * (D + 4) if T == pool else 0)
    sets = _sets(device, per_set) if T == pool else 1
    ks = [DeviceArray.from_numpy(k, device) for _ in range(sets)]
    slots = [DeviceArray.from_numpy(rng.permutation(nb * BLOCK_SIZE)[:T].astype(np.int64), device)
             for _ in range(sets)]
    caches = [DeviceArray.from_numpy(cache.new_cache(nb, BLOCK_SIZE, D), device) for _ in range(sets)]

    def call(i, stream=None):
        j = i % sets
        quantize_and_cache_keys(ks[j], caches[j], slots[j], preshuffle=preshuffle, power_of_two=power_of_two,
                                stream=stream, device=device)
    nbytes = k.nbytes + 8 * T + T * (D + 4)
    return _timed(device, call, nbytes, repeats, op=op, preshuffle=preshuffle, power_of_two=power_of_two, tokens=T,
                  pool=nb * BLOCK_SIZE, sets=sets)


def bench_gather(device, R: int, mean: int, preshuffle: bool, repeats: int = 10) -> dict:
    """gather_cached_keys of R requests of odd lengths near `mean` (random block tables over an exact pool)."""
    rng = np.random.default_rng(1)
    lens = (2 * rng.integers(mean // 2, mean // 2 + mean // 8 + 1, R) + 1).astype(np.int64)
    tables, nb = cache.make_block_tables(lens, BLOCK_SIZE, rng)
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    N = int(cu[-1])
    pool = rng.integers(0, 256, (nb, BLOCK_SIZE, D + 4), dtype=np.uint8)
    sets = _sets(device, pool.nbytes + N * (D + 4))
    caches = [DeviceArray.from_numpy(pool, device) for _ in range(sets)]
    outs = [(DeviceArray.empty((N, D), np.uint8, device), DeviceArray.empty((N,), np.float32, device))
            for _ in range(sets)]
    bt, cu_d = DeviceArray.from_numpy(tables, device), DeviceArray.from_numpy(cu, device)

    def call(i, stream=None):
        j = i % sets
        gather_cached_keys(caches[j], bt, cu_d, preshuffle=preshuffle, out=outs[j], stream=stream, device=device)
    nbytes = 2 * N * (D + 4) + 4 * int(-(-lens // BLOCK_SIZE).sum()) + cu.nbytes
    return _timed(device, call, nbytes, repeats, op="gather", preshuffle=preshuffle, power_of_two=None, tokens=N,
                  requests=R, sets=sets)


def bench_cache(device, repeats: int = 10, progress=lambda msg: None) -> list[dict]:
    """Every row of `hipindexer bench cache` on `device` (tiny sizes on the emulator)."""
    emu = emulated(device)
    write_t = EMULATOR["write_t"] if emu else WRITE_T
    gather_r, gather_mean = (EMULATOR["gather_r"], EMULATOR["gather_mean"]) if emu else (GATHER_R, GATHER_MEAN)
    step_pool = EMULATOR["step_pool"] if emu else STEP_POOL
    rows = []
    for preshuffle in (False, True):
        layout = "preshuffled" if preshuffle else "block-flat"
        for name, fn in (("write", lambda: bench_write(device, write_t, write_t, preshuffle, True, repeats)),
                         ("write", lambda: bench_write(device, write_t, write_t, preshuffle, False, repeats)),
                         ("gather", lambda: bench_gather(device, gather_r, gather_mean, preshuffle, repeats)),
                         ("decode_step", lambda: bench_write(device, STEP_T, step_pool, preshuffle, True, repeats,
                                                             op="decode_step"))):
            progress(f"{name} {layout}")
            r = fn()
            rows.append(r)
            graph = f", graph {r['us_graph']:.2f} us" if r["us_graph"] else ""
            progress(f"  {r['us']:.2f} us{graph}, {figure(r['GBps'])} GB/s, host {r['host_us']:.1f} us/call")
    return rows
