"""`hipindexer check cache`: the paged-cache ops on a device against the numpy helpers, bit for bit.

Writes (quantize_and_cache_keys against cache.quantize_keys + cache.write_cache) compare the whole cache,
so a byte written where it should not be fails as surely as a wrong one: both caches start from the same
random bytes. Gathers (gather_cached_keys against cache.gather_keys of each request) and packed windows
(packed_prefill_windows against cache.packed_prefill_windows) compare every output. Keys come in three
sets: random rows of magnitudes from 1e-6 to 1e6 (zero rows and one-value rows among them), rows built so
that k / scale lands within 64 ulps of every e4m3fn value and of every midpoint between two (the rounding
boundaries, through the division), and every finite value of the input type, in rows of similar
magnitude. Untrusted device values (slots, block ids, lengths out of range) must set their error bit and
leave every other byte alone.
"""
from __future__ import annotations

import itertools
import time
from typing import Callable, Iterator

import ml_dtypes
import numpy as np

from .. import cache
from ..arguments import FP8
from .sweep import FAIL, NA, PASS, Outcome

KEY_TYPES = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16)}
LAYOUTS = ((1, False), (16, False), (16, True), (64, False), (64, True))  # (block_size, preshuffle)
WRITE_TOKENS = (1, 7, 4096, 65536)
QUICK_WRITE_TOKENS = (1, 7, 4096)
DIMS = (128, 64)
GATHER_REQUESTS = (1, 3, 64)
GATHER_MEAN = 2049     # odd tokens per request on a GPU: 64 requests gather about 131072 tokens
QUICK_GATHER_MEAN = 301


# ------------------------------------------------------------------ keys

def random_keys(rng, T: int, D: int, dtype) -> np.ndarray:
    """[T, D] keys: normal values times a per-row magnitude log-uniform in [1e-6, 1e6] ([2e-8, 1e4] for
    float16, whose range ends at 65504 and whose subnormals start below 6.1e-5); every 37th row zero, every
    41st row a single nonzero value (its amax alone sets the scale)."""
    lo, hi = (2e-8, 1e4) if np.dtype(dtype) == np.float16 else (1e-6, 1e6)
    mag = np.exp(rng.uniform(np.log(lo), np.log(hi), (T, 1))).astype(np.float32)
    k = rng.standard_normal((T, D), dtype=np.float32) * mag
    k[::37] = 0
    one = np.arange(T)[5::41]
    k[one] = 0
    k[one, rng.integers(0, D, one.size)] = mag[one, 0]
    return k.astype(dtype)


def fp8_boundaries(ulps: int = 64) -> np.ndarray:
    """Positive float32 values within `ulps` of every e4m3fn value up to 448 and of every midpoint between
    two neighbours (the values where rounding to nearest even decides), sorted, unique."""
    codes = np.arange(0x7F, dtype=np.uint8).view(FP8).astype(np.float32)
    points = np.concatenate([codes, (codes[:-1] + codes[1:]) / 2]).astype(np.float32)
    bits = points.view(np.int32)[:, None] + np.arange(-ulps, ulps + 1, dtype=np.int32)[None, :]
    vals = bits[bits >= 0].view(np.float32)
    return np.unique(vals[(vals <= 448) & np.isfinite(vals)])


def boundary_keys(rng, D: int, dtype) -> np.ndarray:
    """Rows whose quotients k / scale sit on the rounding boundaries.

    float32: each row is amax = 448 * 2^e (so scale = 2^e and the division is exact) followed by boundary
    values times 2^e, both signs; then rows of amax 448 * s for arbitrary s, whose boundary values times s
    are rounded to float32 first, so the float32 division decides the side; then rows of float32
    subnormals and of the largest floats. float16 / bfloat16: every finite value of the type, sorted by
    magnitude and cut into rows (neighbours share a row, so its quotients spread over the fp8 range)."""
    if dtype != np.float32:
        info = np.iinfo(np.uint16)
        vals = np.arange(info.max + 1, dtype=np.uint16).view(dtype)
        vals = vals[np.isfinite(vals.astype(np.float32))]
        vals = vals[np.argsort(np.abs(vals.astype(np.float32)), kind="stable")]
        vals = np.concatenate([vals, np.zeros(-vals.size % D, dtype)])
        return rng.permuted(vals.reshape(-1, D), axis=1)
    b = fp8_boundaries()
    sign = np.where(rng.random(b.size) < 0.5, -1, 1).astype(np.float32)
    b = np.concatenate([b * sign, -b * sign]).astype(np.float32)
    per = D - 1
    b = np.concatenate([b, np.zeros(-b.size % per, np.float32)]).reshape(-1, per)
    n = b.shape[0]
    e = rng.integers(-100, 100, n).astype(np.float32)
    exact = np.concatenate([np.full((n, 1), 448, np.float32), b], axis=1) * np.exp2(e)[:, None]
    s = np.exp(rng.uniform(np.log(1e-30), np.log(1e30), n)).astype(np.float32)
    inner = np.clip(b, -440, 440)  # leaves room below amax for float32 rounding of value * s
    divided = np.concatenate([np.full((n, 1), 448, np.float32) * s[:, None],
                              (inner.astype(np.float64) * s[:, None]).astype(np.float32)], axis=1)
    tiny = rng.integers(-(1 << 23) + 1, 1 << 23, (8, D)).astype(np.int32)
    tiny = (np.abs(tiny) | (np.sign(tiny).clip(-1, 0).astype(np.int32) << 31)).view(np.float32)  # subnormals
    tiny[0] = 0
    tiny[0, 3] = np.float32(2.0 ** -149)  # amax / 448 rounds to 0: scale 1
    big = (rng.standard_normal((2, D)) * 3e38).clip(-3.4e38, 3.4e38).astype(np.float32)
    return np.concatenate([exact, divided, tiny, big]).astype(np.float32)


# ------------------------------------------------------------------ cases

def _dev(a, device):
    from ..runtime import DeviceArray
    return DeviceArray.from_numpy(np.ascontiguousarray(a), device)


def _errors_array(device):
    return _dev(np.zeros(1, np.int32), device)


def _timed(fn: Callable[[], Outcome], op: str, name: str) -> Outcome:
    """fn's outcome with its seconds; an exception is the case's failure, not the sweep's end."""
    t0 = time.perf_counter()
    try:
        o = fn()
    except Exception as e:  # noqa: BLE001 - reported as the case's failure
        o = Outcome(op, name, FAIL, f"{type(e).__name__}: {e}")
    o.seconds = round(time.perf_counter() - t0, 3)
    return o


def _mismatch(got: np.ndarray, want: np.ndarray, what: str) -> str | None:
    bad = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
    if not bad.size:
        return None
    return f"{bad.size} {what} differ, the first at flat index {int(bad[0])}: {got.reshape(-1)[bad[0]]!r} " \
           f"instead of {want.reshape(-1)[bad[0]]!r}"


def write_case(rng, device, T: int, D: int, block_size: int, preshuffle: bool, key_type: str,
               power_of_two: bool, keys: str = "random") -> Outcome:
    """Quantise T keys into a pool of about 1.25 T slots at a random permutation of them (every 10th
    token skipped with -1), slot_mapping int64 for even T and int32 for odd; the whole cache compared."""
    from ..ops import quantize_and_cache_keys
    dtype = KEY_TYPES[key_type]
    k = random_keys(rng, T, D, dtype) if keys == "random" else boundary_keys(rng, D, dtype)
    T = k.shape[0]
    name = f"T{T}_D{D}_bs{block_size}_{'shuf' if preshuffle else 'flat'}_{key_type}" \
           f"{'_pow2' if power_of_two else ''}_{keys}"
    nb = -(-(T + T // 4 + 1) // block_size)
    slots = rng.permutation(nb * block_size)[:T].astype(np.int64 if T % 2 == 0 else np.int32)
    slots[::10] = -1
    start = rng.integers(0, 256, (nb, block_size, D + 4), dtype=np.uint8)
    kv = _dev(start, device)
    errors = _errors_array(device)
    quantize_and_cache_keys(_dev(k, device), kv, _dev(slots, device), preshuffle=preshuffle,
                            power_of_two=power_of_two, errors=errors, device=device)
    got = kv.numpy()
    flags = int(errors.numpy()[0])
    want = start.copy()
    cache.write_cache(want, *cache.quantize_keys(k, power_of_two), slots, preshuffle=preshuffle)
    if flags:
        return Outcome("cache_write", name, FAIL, f"error flags {flags:#x} on valid slots")
    msg = _mismatch(got, want, "cache bytes")
    return Outcome("cache_write", name, FAIL if msg else PASS, msg or f"{T} tokens bitwise equal")


def _odd_lengths(rng, R: int, mean: int) -> np.ndarray:
    return (2 * rng.integers(0, mean, R) + 1).astype(np.int64)


def gather_case(rng, device, R: int, D: int, block_size: int, preshuffle: bool, mean: int) -> Outcome:
    """R requests of odd lengths through random block tables over a pool of random bytes, gathered into an
    output two rows longer (NaN-poisoned: rows past cu_seq_lens[R] must stay untouched)."""
    from ..ops import gather_cached_keys
    from ..runtime import DeviceArray
    name = f"R{R}_D{D}_bs{block_size}_{'shuf' if preshuffle else 'flat'}"
    lens = _odd_lengths(rng, R, mean)
    tables, nb = cache.make_block_tables(lens, block_size, rng)
    kv = rng.integers(0, 256, (nb, block_size, D + 4), dtype=np.uint8)
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    N = int(cu[-1])
    out_k = DeviceArray.empty((N + 2, D), np.uint8, device).fill(0xFF)
    out_s = DeviceArray.empty((N + 2,), np.float32, device).fill(np.nan)
    errors = _errors_array(device)
    gather_cached_keys(_dev(kv, device), _dev(tables, device), _dev(cu, device), preshuffle=preshuffle,
                       out=(out_k, out_s), errors=errors, device=device)
    got_k, got_s = out_k.numpy(), out_s.numpy().view(np.uint32)
    flags = int(errors.numpy()[0])
    parts = [cache.gather_keys(kv, tables[r], int(lens[r]), D, preshuffle) for r in range(R)]
    want_k = np.concatenate([p[0].view(np.uint8) for p in parts] + [np.full((2, D), 0xFF, np.uint8)])
    want_s = np.concatenate([p[1] for p in parts] + [np.full(2, np.nan, np.float32)]).view(np.uint32)
    if flags:
        return Outcome("cache_gather", name, FAIL, f"error flags {flags:#x} on valid block tables")
    msg = _mismatch(got_k, want_k, "key bytes") or _mismatch(got_s, want_s, "scale bits")
    return Outcome("cache_gather", name, FAIL if msg else PASS, msg or f"{N} tokens bitwise equal")


def windows_case(rng, device, R: int, spare: int) -> Outcome:
    """R requests (some with no query rows) and `spare` rows past them, device against numpy."""
    from ..ops import packed_prefill_windows
    name = f"R{R}_spare{spare}"
    L = rng.integers(0, 3000, R).astype(np.int32)
    q = (L * rng.random(R)).astype(np.int32)
    q[::5] = 0
    M = int(q.sum()) + spare
    ks, ke = packed_prefill_windows(_dev(q, device), _dev(L, device), num_rows=M, device=device)
    want_ks, want_ke = cache.packed_prefill_windows(q, L, M)
    msg = _mismatch(ks.numpy(), want_ks, "ks") or _mismatch(ke.numpy(), want_ke, "ke")
    return Outcome("windows", name, FAIL if msg else PASS, msg or f"{M} rows equal")


def untrusted_case(rng, device) -> Outcome:
    """Device-held values out of range, one per op: the bit set, nothing written through them, every other
    byte as numpy writes it."""
    from ..ops import gather_cached_keys, packed_prefill_windows, quantize_and_cache_keys
    from ..runtime import DeviceArray
    problems = []
    D, bs, nb = 64, 16, 6
    k = random_keys(rng, 8, D, np.float32)
    slots = np.array([0, nb * bs, 17, -2, 40, -1, 2 ** 40, 94], np.int64)  # the last slot stays unwritten
    start = rng.integers(0, 256, (nb, bs, D + 4), dtype=np.uint8)
    kv, errors = _dev(start, device), _errors_array(device)
    quantize_and_cache_keys(_dev(k, device), kv, _dev(slots, device), errors=errors, device=device)
    ok = slots >= 0
    ok &= slots < nb * bs
    want = start.copy()
    cache.write_cache(want, *cache.quantize_keys(k[ok]), slots[ok])
    if int(errors.numpy()[0]) != 2:
        problems.append(f"write: flags {int(errors.numpy()[0]):#x}, expected 0x2")
    msg = _mismatch(kv.numpy(), want, "cache bytes")
    if msg:
        problems.append("write: " + msg)

    tables = np.array([[2, 7, 1], [3, -1, 0]], np.int32)  # 7 and -1 name no block
    cu = np.array([0, 40, 60], np.int32)
    out_k = DeviceArray.empty((60, D), np.uint8, device).fill(0xEE)
    out_s = DeviceArray.empty((60,), np.float32, device).fill(np.nan)
    errors = _errors_array(device)
    gather_cached_keys(kv, _dev(tables, device), _dev(cu, device), out=(out_k, out_s), errors=errors, device=device)
    got_k, got_s = out_k.numpy(), out_s.numpy()
    cur = kv.numpy()
    wk, ws = np.zeros((60, D), np.uint8), np.zeros(60, np.float32)
    for r, (a, b) in enumerate([(0, 40), (40, 60)]):
        for i in range(b - a):
            blk = tables[r, i // bs]
            if 0 <= blk < nb:
                kk, ss = cache.gather_blocks(cur, [blk], D)
                wk[a + i], ws[a + i] = kk[i % bs].view(np.uint8), ss[i % bs]
    if int(errors.numpy()[0]) != 1:
        problems.append(f"gather: flags {int(errors.numpy()[0]):#x}, expected 0x1")
    msg = _mismatch(got_k, wk, "gathered key bytes") or _mismatch(got_s.view(np.uint32), ws.view(np.uint32), "scales")
    if msg:
        problems.append("gather: " + msg)

    errors = _errors_array(device)
    ks, ke = packed_prefill_windows(_dev(np.array([2, -1, 5, 1], np.int32), device),
                                    _dev(np.array([4, 3, 2, 1], np.int32), device), num_rows=9, errors=errors,
                                    device=device)
    want_ks, want_ke = [0, 0, 7, 7, 7, 7, 7, 9, 0], [3, 4, 7, 7, 7, 7, 7, 10, 0]
    if int(errors.numpy()[0]) != 4:
        problems.append(f"windows: flags {int(errors.numpy()[0]):#x}, expected 0x4")
    if ks.numpy().tolist() != want_ks or ke.numpy().tolist() != want_ke:
        problems.append(f"windows: {ks.numpy().tolist()} {ke.numpy().tolist()}, expected {want_ks} {want_ke}")
    return Outcome("untrusted", "slots_block_ids_lengths", FAIL if problems else PASS,
                   "; ".join(problems) or "bits set, nothing written through them")


OFFSET_CASES = ((1, 1 << 25), (64, 1 << 19))  # (block_size, blocks below the ones used): pools past 4 GiB


def offset_case(rng, device, block_size: int, base: int) -> Outcome:
    """Writes and gathers in the top blocks of a pool of base + their own blocks, so every byte offset is
    past 4 GiB (64-bit offsets), against numpy on a pool of their own. Not applicable without the memory."""
    from ..ops import gather_cached_keys, quantize_and_cache_keys
    from ..runtime import DeviceArray
    name = f"offset_bs{block_size}_above_{base}_blocks"
    D, T = 128, 300
    nb = -(-(T + T // 4) // block_size)
    need = (base + nb) * block_size * (D + 4)
    if getattr(device, "backend", "") == "emu" or need + (1 << 30) > getattr(device, "total_memory", 0):
        return Outcome("cache_offset", name, NA, f"needs {need / 2**30:.1f} GiB of device memory (and a GPU)")
    preshuffle = block_size % 16 == 0
    start = rng.integers(0, 256, (nb, block_size, D + 4), dtype=np.uint8)
    pool = DeviceArray.empty((base + nb, block_size, D + 4), np.uint8, device)
    pool[base:].copy_from(start)
    k = random_keys(rng, T, D, KEY_TYPES["bf16"])
    slots = rng.permutation(nb * block_size)[:T].astype(np.int64)
    slots[::10] = -1
    high = np.where(slots >= 0, slots + base * block_size, -1).astype(np.int32 if block_size == 1 else np.int64)
    quantize_and_cache_keys(_dev(k, device), pool, _dev(high, device), preshuffle=preshuffle, device=device)
    want = start.copy()
    cache.write_cache(want, *cache.quantize_keys(k), slots, preshuffle=preshuffle)
    lens = np.array([T // 3, T // 3 + 1, 7])
    tables = (rng.permutation(nb)[:3 * -(-max(lens) // block_size)].reshape(3, -1)).astype(np.int32)
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    gk, gs = gather_cached_keys(pool, _dev(tables + base, device), _dev(cu, device), preshuffle=preshuffle,
                                out=(DeviceArray.empty((int(cu[-1]), D), np.uint8, device),
                                     DeviceArray.empty((int(cu[-1]),), np.float32, device)), device=device)
    parts = [cache.gather_keys(want, tables[r], int(lens[r]), D, preshuffle) for r in range(3)]
    msg = _mismatch(pool[base:].numpy(), want, "cache bytes") or \
        _mismatch(gk.numpy().view(np.uint8), np.concatenate([p[0] for p in parts]).view(np.uint8), "key bytes") or \
        _mismatch(gs.numpy().view(np.uint32), np.concatenate([p[1] for p in parts]).view(np.uint32), "scales")
    del pool
    return Outcome("cache_offset", name, FAIL if msg else PASS, msg or f"pool {need / 2**30:.1f} GiB; bitwise equal")


def cache_cases(quick: bool) -> Iterator[Callable[[np.random.Generator, object], Outcome]]:
    """Every case of `hipindexer check cache` (quick: the CI size, for the emulator), as functions of
    (rng, device)."""
    def case(op, name, fn, *args):
        return lambda rng, dev: _timed(lambda: fn(rng, dev, *args), op, name)
    tokens = QUICK_WRITE_TOKENS if quick else WRITE_TOKENS
    for T, D, (bs, shuf), kt, p2 in itertools.product(tokens, DIMS, LAYOUTS, KEY_TYPES, (False, True)):
        yield case("cache_write", f"T{T}_D{D}_bs{bs}_{kt}", write_case, T, D, bs, shuf, kt, p2)
    for D, kt, p2 in itertools.product(DIMS, KEY_TYPES, (False, True)):
        yield case("cache_write", f"boundary_D{D}_{kt}", write_case, 0, D, 16, D == 64, kt, p2, "boundary")
    mean = QUICK_GATHER_MEAN if quick else GATHER_MEAN
    for R, D, (bs, shuf) in itertools.product(GATHER_REQUESTS, DIMS, LAYOUTS):
        yield case("cache_gather", f"R{R}_D{D}_bs{bs}", gather_case, R, D, bs, shuf, mean)
    for R, spare in ((1, 0), (3, 5), (300, 1) if quick else (700, 1)):
        yield case("windows", f"R{R}", windows_case, R, spare)
    yield case("untrusted", "slots_block_ids_lengths", untrusted_case)
    if not quick:
        for bs, base in OFFSET_CASES:
            yield case("cache_offset", f"offset_bs{bs}", offset_case, bs, base)
