"""The gfx950 wave primitives in the CPU emulator, each against an independent
numpy formulation of the lane layouts in docs/gfx950.md.

Test kernels: tests/emu/prims.hip, compiled with -DHX_EMU and launched straight
through libhxemu (no HIP runtime), so these run in the main pytest process.
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import emu_harness as H

FP8 = ml_dtypes.float8_e4m3fn
pytestmark = pytest.mark.toolchain


@pytest.fixture(scope="module")
def emu():
    why = H.toolchain_missing()
    if why:
        pytest.skip(why)
    return H.prims_lib()


def _params(**kw):
    p = H.PrimParams()
    p.keep = list(kw.values())  # the arrays must outlive the launch, not just this call
    for k, v in kw.items():
        setattr(p, k, H.ptr(v) if isinstance(v, np.ndarray) else v)
    return p


def _fp8(rng, shape):
    return np.clip(rng.standard_normal(shape) * 4, -448, 448).astype(FP8)


# ------------------------------------------------------------------ MFMA
# docs/gfx950.md, wave64. 32x32x64: g = lane // 32; operand byte 16i + j of lane l
# is A[l % 32][16g + 32i + j] (B: column l % 32, same K); c[4i + j] is
# C[8i + 4g + j][l % 32]. 16x16x128: g = lane // 16; byte 8i + j is
# A[l % 16][8g + 32i + j]; c[i] is C[4g + i][l % 16].
def _layout(n):
    lane = np.arange(64)[:, None]
    byte = np.arange(32)[None, :]
    if n == 32:
        g = lane // 32
        k = 16 * g + 32 * (byte // 16) + byte % 16
        e = np.arange(16)[None, :]
        row = 8 * (e // 4) + 4 * g + e % 4
    else:
        g = lane // 16
        k = 8 * g + 32 * (byte // 8) + byte % 8
        e = np.arange(4)[None, :]
        row = 4 * g + e
    return lane % n, k, row


@pytest.mark.parametrize("n", [32, 16])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mfma_matches_a_times_b(emu, n, seed):
    rng = np.random.default_rng(seed)
    K = 64 if n == 32 else 128
    A, B = _fp8(rng, (n, K)), _fp8(rng, (K, n))
    C = rng.standard_normal((n, n)).astype(np.float32)
    col, k, row = _layout(n)
    a = np.ascontiguousarray(A.view(np.uint8)[col, k])   # [64, 32]: lane l's operand bytes
    b = np.ascontiguousarray(B.view(np.uint8)[k, col])
    c = np.ascontiguousarray(C[row, col[:, :1]])          # [64, 16 or 4]
    d = np.full_like(c, np.nan)
    emu.launch("hx_t_mfma32" if n == 32 else "hx_t_mfma16", _params(in0=a, in1=b, out0=d, out1=c))
    ref = A.astype(np.float64) @ B.astype(np.float64) + C
    want = ref[row, col[:, :1]]                            # element by element, in the lanes' layout
    tol = np.spacing(np.abs(want).astype(np.float32))      # round once: within one fp32 ulp
    assert np.all(np.abs(d - want) <= tol), np.abs(d - want).max()
    # the accumulator map covers every C element exactly once
    assert sorted(zip(row.ravel(), np.broadcast_to(col[:, :1], row.shape).ravel())) == \
        [(i, j) for i in range(n) for j in range(n)]


@pytest.mark.parametrize("n", [32, 16])
def test_mfma_sums_exactly_over_the_whole_fp8_range(emu, n):
    """Any finite fp8 bytes, subnormals and +-448 among them: every partial sum of products is exact in a double,
    so the result is C plus the exact sum rounded once, bit for bit, whatever order the emulator adds in."""
    rng = np.random.default_rng(n)
    K = 64 if n == 32 else 128
    finite = np.setdiff1d(np.arange(256, dtype=np.uint8), [0x7F, 0xFF])
    A, B = (rng.choice(finite, s).view(FP8) for s in ((n, K), (K, n)))
    A[0, :] = np.array(0x7E, np.uint8).view(FP8)  # 448: row 0's products at their largest
    B[:, 0] = np.array(0x7E, np.uint8).view(FP8)
    C = rng.standard_normal((n, n)).astype(np.float32)
    col, k, row = _layout(n)
    a = np.ascontiguousarray(A.view(np.uint8)[col, k])
    b = np.ascontiguousarray(B.view(np.uint8)[k, col])
    c = np.ascontiguousarray(C[row, col[:, :1]])
    d = np.full_like(c, np.nan)
    emu.launch("hx_t_mfma32" if n == 32 else "hx_t_mfma16", _params(in0=a, in1=b, out0=d, out1=c))
    want = (A.astype(np.float64) @ B.astype(np.float64) + C).astype(np.float32)[row, col[:, :1]]
    assert np.array_equal(d, want)


def test_mfma_rejects_non_unit_scales(emu):
    z = np.zeros((64, 32), np.uint8)
    c = np.zeros((64, 16), np.float32)
    with pytest.raises(H.LaunchError, match="unit scales"):
        emu.launch("hx_t_mfma32", _params(in0=z, in1=z, out0=c.copy(), out1=c, x=0x80, y=0x7F))


# ------------------------------------------------------------ cross-lane
def test_permlane32_swap_exact(emu):
    rng = np.random.default_rng(3)
    xy = rng.integers(0, 2**32, 128, dtype=np.uint64).astype(np.uint32)  # any bits, NaN payloads too
    out = np.zeros(128, np.uint32)
    emu.launch("hx_t_permlane", _params(in0=xy, out0=out))
    x, y = xy[:64], xy[64:]
    # vA's lanes 32-63 <-> vB's lanes 0-31
    np.testing.assert_array_equal(out[:64], np.concatenate([x[:32], y[:32]]))
    np.testing.assert_array_equal(out[64:], np.concatenate([x[32:], y[32:]]))


def test_permlane16_swap_exact(emu):
    rng = np.random.default_rng(4)
    xy = rng.integers(0, 2**32, 128, dtype=np.uint64).astype(np.uint32)
    out = np.zeros(128, np.uint32)
    emu.launch("hx_t_permlane16", _params(in0=xy, out0=out))
    x, y = xy[:64].reshape(4, 16), xy[64:].reshape(4, 16)  # rows of 16 lanes
    # odd rows of vA <-> even rows of vB: A row 1 with B row 0, A row 3 with B row 2
    np.testing.assert_array_equal(out[:64].reshape(4, 16), np.stack([x[0], y[0], x[2], y[2]]))
    np.testing.assert_array_equal(out[64:].reshape(4, 16), np.stack([x[1], y[1], x[3], y[3]]))


def test_two_swap_stages_sum_four_lane_groups_of_four_registers():
    """The paged decode kernel's head reduction, in numpy on the layouts above: x_t holds a partial for
    column 16 t + c in lane 16 g + c; two permlane32 swaps, one permlane16 swap and three adds leave
    column l's sum over g in lane l."""
    rng = np.random.default_rng(5)
    x = [rng.standard_normal(64) for _ in range(4)]

    def swap32(a, b):
        return np.concatenate([a[:32], b[:32]]), np.concatenate([a[32:], b[32:]])

    def swap16(a, b):
        a, b = a.reshape(4, 16), b.reshape(4, 16)
        return np.stack([a[0], b[0], a[2], b[2]]).ravel(), np.stack([a[1], b[1], a[3], b[3]]).ravel()

    x0, x2 = swap32(x[0], x[2])
    x1, x3 = swap32(x[1], x[3])
    y02, y13 = swap16(x0 + x2, x1 + x3)
    want = np.concatenate([x[t].reshape(4, 16).sum(axis=0) for t in range(4)])
    np.testing.assert_allclose(y02 + y13, want, rtol=1e-12)


def test_readlane_broadcasts_one_lane(emu):
    v = np.arange(64, dtype=np.uint32) * 7 + 3
    out = np.zeros(64, np.uint32)
    emu.launch("hx_t_readlane", _params(in0=v, out0=out, x=37))
    assert (out == v[37]).all()


@pytest.mark.parametrize("seed", [0, 1])
def test_ballot_is_every_lanes_bit_and_lanes_below_counts_them(emu, seed):
    pred = (np.random.default_rng(seed).random(64) < 0.4).astype(np.uint32)
    pred[63] = 1  # the high word's top bit
    out, below = np.zeros(128, np.uint32), np.zeros(64, np.uint32)
    emu.launch("hx_t_ballot", _params(in0=pred, out0=out, out1=below))
    mask = sum(int(b) << i for i, b in enumerate(pred))
    got = out.reshape(64, 2).astype(np.uint64)
    assert ((got[:, 0] | (got[:, 1] << np.uint64(32))) == np.uint64(mask)).all()
    assert (below == np.concatenate([[0], np.cumsum(pred)[:-1]])).all()


@pytest.mark.parametrize("size", [4, 16])
def test_gather_reads_each_lanes_own_address(emu, size):
    mem = np.random.default_rng(size).integers(0, 256, 8192, dtype=np.uint8)
    off = (np.arange(64, dtype=np.uint32) * 132) % (8192 - 16)  # dword-aligned, not 16-byte aligned
    off = (off // 4 * 4).astype(np.uint32)
    off[5] = ~np.uint32(0)                                      # lane 5 loads nothing
    out = np.zeros(64 * 4, np.uint32)
    emu.launch("hx_t_gather", _params(in0=mem, in1=off, out0=out, x=size))
    o = out.view(np.uint8).reshape(64, 16)
    for lane in range(64):
        want = np.zeros(16, np.uint8) if lane == 5 else np.pad(mem[off[lane]:off[lane] + size], (0, 16 - size))
        np.testing.assert_array_equal(o[lane], want)


def test_gather_that_is_not_dword_aligned_is_an_error(emu):
    off = np.zeros(64, np.uint32)
    off[9] = 6
    with pytest.raises(H.LaunchError, match="not dword aligned"):
        emu.launch("hx_t_gather", _params(in0=np.zeros(64, np.uint8), in1=off, out0=np.zeros(256, np.uint32), x=16))


def test_scalar_load_is_one_wave_uniform_load(emu):
    mem = np.arange(64, dtype=np.uint32) * 3 + 1
    out = np.zeros(64, np.uint32)
    emu.launch("hx_t_scalar", _params(in0=mem, out0=out, x=9))
    assert (out == mem[9]).all()
    with pytest.raises(H.LaunchError, match="hx_scalar_load_b32 .*wave-uniform"):
        emu.launch("hx_t_scalar", _params(in0=mem, out0=out, x=0, y=1))


def test_loads_are_reported_to_the_load_hook(emu):
    """Every in-range load of a primitive calls the hook with its address and size; out-of-range ones
    (which read nothing) do not."""
    import ctypes
    seen = []
    hook_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint)
    hook = hook_t(lambda src, n: seen.append((src, n)))
    emu.core.hx_emu_set_load_hook(hook)
    try:
        mem = np.zeros(4096, np.uint8)
        _buffer_run = _params(in0=mem, in1=np.arange(64, dtype=np.uint32) * 16, out0=np.zeros(256, np.uint32),
                              out1=np.zeros(256, np.uint32), n=512, x=16)
        emu.launch("hx_t_buffer", _buffer_run)          # lanes 0-31 in range, 32-63 out
        off = np.arange(64, dtype=np.uint32) * 4
        emu.launch("hx_t_gather", _params(in0=mem, in1=off, out0=np.zeros(256, np.uint32), x=4))
        emu.launch("hx_t_lds", _params(in0=mem, out0=np.zeros(1024, np.uint8), n=1024, x=4))
        emu.launch("hx_t_scalar", _params(in0=mem, out0=np.zeros(64, np.uint32), x=3))  # one load per wave
    finally:
        emu.core.hx_emu_set_load_hook(None)
    base = mem.ctypes.data
    assert sorted(seen) == sorted([(base + 16 * i, 16) for i in range(32)] + [(base + 4 * i, 4) for i in range(64)] * 2
                                  + [(base + 12, 4)])


@pytest.mark.parametrize("mask,width", [(1, 64), (32, 32), (5, 2), (63, 16)])
def test_shuffles_and_reductions(emu, mask, width):
    rng = np.random.default_rng(mask)
    v = rng.standard_normal(64).astype(np.float32)
    src = rng.integers(0, 200, 64).astype(np.uint32)  # ds_bpermute wraps the lane index
    out = np.zeros(256, np.float32)
    emu.launch("hx_t_shfl", _params(in0=v, in1=src, out0=out, x=mask, y=width))
    lane = np.arange(64)
    np.testing.assert_array_equal(out[:64], v[lane ^ mask])
    np.testing.assert_array_equal(out[64:128], v[src & 63])
    np.testing.assert_array_equal(out[128:192], np.full(64, v[0]))
    groups = v.reshape(-1, width).sum(axis=1, dtype=np.float64)
    np.testing.assert_allclose(out[192:], np.repeat(groups, width), rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------- buffers
def _buffer(emu, size, vo, n, soff=0, store=False):
    mem = np.random.default_rng(size).integers(0, 256, 4096, dtype=np.uint8)
    before = mem.copy()
    src = np.arange(64 * 4, dtype=np.uint32) + 0xA0000000
    out = np.zeros(64 * 4, np.uint32)
    emu.launch("hx_t_buffer", _params(in0=mem, in1=np.asarray(vo, np.uint32), out0=out, out1=src, n=n, x=size,
                                      y=soff, z=int(store)))
    return before, mem, out.reshape(64, 4), src.reshape(64, 4)


@pytest.mark.parametrize("size", [4, 8, 16])
def test_buffer_load_in_and_out_of_range(emu, size):
    vo = np.arange(64) * 16 + (0 if size == 16 else 4)
    n = int(vo[62])  # lane 61 ends inside, lane 62 starts exactly at num_records: out of range
    vo[-1] = 5000
    before, _, out, _ = _buffer(emu, size, vo, n)
    w = size // 4
    for l, off in enumerate(vo):
        want = before[off:off + size].view(np.uint32) if off + size <= n else np.zeros(w, np.uint32)
        np.testing.assert_array_equal(out[l, :w], want, err_msg=f"lane {l} offset {off}")


@pytest.mark.parametrize("size", [4, 8, 16])
def test_buffer_store_drops_out_of_range(emu, size):
    n = 512
    vo = np.arange(64) * 16
    before, mem, _, src = _buffer(emu, size, vo, n, store=True)
    want = before.copy()
    for l, off in enumerate(vo):
        if off + size <= n:
            want[off:off + size] = src[l, :size // 4].view(np.uint8)
    np.testing.assert_array_equal(mem, want)


@pytest.mark.parametrize("store", [False, True])
def test_buffer_straddle_is_an_error(emu, store):
    vo = np.zeros(64, np.uint32)
    vo[9] = 1000 - 8  # 16 bytes at 992 over num_records 1000
    with pytest.raises(H.LaunchError, match="straddles num_records 1000"):
        _buffer(emu, 16, vo, 1000, store=store)


def test_buffer_soffset_ambiguity_is_an_error(emu):
    vo = np.zeros(64, np.uint32)
    vo[3] = 900  # in range without soffset, out of range with it
    with pytest.raises(H.LaunchError, match="soffset"):
        _buffer(emu, 4, vo, 1000, soff=200)


# -------------------------------------------------------------------- fp8
def test_fp8_to_f32_all_256_patterns(emu):
    codes = np.arange(256, dtype=np.uint8)
    out = np.zeros(256, np.float32)
    emu.launch("hx_t_fp8", _params(in0=codes, in1=np.zeros(256, np.float32), out0=out, out1=np.zeros(256, np.uint8),
                                   n=256))
    want = codes.view(FP8).astype(np.float32)
    nan = np.isnan(want)
    assert list(np.flatnonzero(nan)) == [0x7F, 0xFF] and np.isnan(out[nan]).all()
    np.testing.assert_array_equal(out[~nan].view(np.uint32), want[~nan].view(np.uint32))  # +-0, subnormals, 448


def test_f32_to_fp8_rounds_to_nearest_even_and_saturates(emu):
    fin = np.arange(256, dtype=np.uint8)
    fin = fin[(fin & 0x7F) != 0x7F]
    vals = fin.view(FP8).astype(np.float64)
    pos = np.unique(np.abs(vals))
    mids = (pos[:-1] + pos[1:]) / 2  # exact ties: must go to the even code
    rng = np.random.default_rng(7)
    x = np.concatenate([vals, mids, -mids, rng.standard_normal(2000) * 100, rng.standard_normal(500) * 1e-3,
                        [448.0, 449.0, 463.9, 464.0, 1e6, -1e6, np.inf, -np.inf, 1e-30, -1e-30]]).astype(np.float32)
    out = np.zeros(len(x), np.uint8)
    emu.launch("hx_t_fp8", _params(in0=np.zeros(len(x), np.uint8), in1=x, out0=np.zeros(len(x), np.float32), out1=out,
                                   n=len(x)))
    want = np.clip(x, -448, 448).astype(FP8).view(np.uint8)  # saturating, else ml_dtypes' RNE
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(out[:len(fin)], fin)  # every finite code round-trips, -0 included
    nan = np.array([np.nan, -np.nan], np.float32)
    o = np.zeros(2, np.uint8)
    emu.launch("hx_t_fp8", _params(in0=np.zeros(4, np.uint8), in1=nan, out0=np.zeros(2, np.float32), out1=o, n=2))
    assert list(o) == [0x7F, 0xFF]


# -------------------------------------------------------------------- LDS
@pytest.mark.parametrize("size", [4, 16])
def test_global_to_lds_lands_at_the_wait(emu, size):
    src = np.random.default_rng(size).integers(0, 256, 1024, dtype=np.uint8)
    out = np.zeros(1024, np.uint8)
    emu.launch("hx_t_lds", _params(in0=src, out0=out, n=1024, x=size))
    np.testing.assert_array_equal(out[:64 * size], src[:64 * size])
    assert (out[64 * size:] == 0xFF).all()  # the rest of the array is still poison


def test_missing_lds_wait_reads_poison(emu):
    src = np.arange(1024, dtype=np.uint32).view(np.uint8)[:1024]
    out = np.zeros(1024, np.uint8)
    emu.launch("hx_t_lds", _params(in0=src, out0=out, n=1024, x=16, y=1))
    assert (out == 0xFF).all()


def test_lds_load_out_of_range_is_zero(emu):
    src = np.full(1024, 7, np.uint8)
    out = np.zeros(1024, np.uint8)
    emu.launch("hx_t_lds", _params(in0=src, out0=out, n=512, x=16))
    assert (out[:512] == 7).all() and (out[512:] == 0).all()


@pytest.mark.parametrize("stores,count,lands", [(2, 2, True), (3, 2, True), (2, 1, True), (1, 2, False),
                                                 (0, 1, False)])
def test_a_counted_wait_lands_what_came_before_the_last_n(emu, stores, count, lands):
    """vmcnt(N): the DMA has landed once N vector memory instructions follow it (stores count too)."""
    src = np.random.default_rng(stores).integers(0, 256, 1024, dtype=np.uint8)
    out = np.zeros(1024, np.uint8)
    emu.launch("hx_t_lds_count", _params(in0=src, out0=out, out1=np.zeros(64, np.uint32), n=1024, x=stores,
                                         y=count))
    if lands:
        np.testing.assert_array_equal(out, src)
    else:
        assert (out == 0xFF).all()  # still in flight: the LDS holds its poison


def test_a_counted_wait_needs_every_lane_to_issue_the_same_instructions(emu):
    with pytest.raises(H.LaunchError, match="hx_lds_load_wait_count .*every lane"):
        emu.launch("hx_t_lds_count", _params(in0=np.zeros(1024, np.uint8), out0=np.zeros(1024, np.uint8),
                                             out1=np.zeros(64, np.uint32), n=1024, x=2, y=2, z=1))


def test_packed_clamped_multiply_is_a_clamp_to_0_1(emu):
    x = np.array([-3.0, -0.0, 0.0, 1e-30, 0.25, 0.999, 1.0, 1.5, 3e38, -np.inf, np.inf, np.nan] * 11, np.float32)[:128]
    s = np.array([0.5, 2.0], np.float32)
    out = np.zeros(128, np.float32)
    emu.launch("hx_t_pk_clamp", _params(in0=x, in1=s, out0=out))
    with np.errstate(over="ignore", invalid="ignore"):
        want = np.clip(np.nan_to_num(x.reshape(64, 2) * s, nan=0.0), 0, 1).reshape(-1)
    np.testing.assert_array_equal(out, want)


# ------------------------------------------------------ misuse and hygiene
@pytest.mark.parametrize("case,match", [
    (1, r"divergent wave primitive while lanes 0-31 wait at hx_shfl \(.*prims.hip:\d+.*lanes 32-63 are at hx_shfl"),
    (2, r"exited lane while lanes 0-4,6-63 wait at hx_shfl.*lanes 5 are exited"),
    (3, r"lanes 7 wait at hx_shfl .*primitive #1"),
])
def test_misuse_aborts_with_the_site(emu, case, match):
    with pytest.raises(H.LaunchError, match=match):
        emu.launch("hx_t_misuse", _params(out0=np.zeros(64, np.float32), x=case))


def test_workgroups_run_in_a_random_order(emu):
    out = np.zeros(256, np.uint32)
    count = np.zeros(1, np.uint32)
    emu.launch("hx_t_order", _params(out0=out, out1=count), grid=256)
    assert count[0] == 256 and sorted(out) == list(range(256)) and list(out) != list(range(256))


def test_uninitialised_locals_are_poisoned(emu):
    out = np.zeros(64, np.float32)
    emu.launch("hx_t_uninit", _params(out0=out, n=4))
    assert np.isnan(out).all()


def test_stray_read_past_an_allocation_faults(emu):
    """A device allocation ends at a guard page: one float past it is SIGSEGV, in a child process."""
    code = textwrap.dedent("""
        import ctypes, sys
        import emu_harness as H
        e = H.prims_lib()
        hip = ctypes.CDLL(str(H.BUILD / "lib" / "libamdhip64.so"))
        p = ctypes.c_void_p()
        assert hip.hipMalloc(ctypes.byref(p), ctypes.c_size_t(64)) == 0
        out = (ctypes.c_float * 1)()
        n = int(sys.argv[1])
        e.launch("hx_t_stray", H.PrimParams(p.value, None, ctypes.addressof(out), None, n, 0, 0, 0))
        print("survived", n)
    """)
    paths = [str(H.ROOT), str(Path(H.__file__).parent), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    ok = subprocess.run([sys.executable, "-c", code, "15"], cwd=H.ROOT, env=env, capture_output=True, text=True)
    assert ok.returncode == 0 and "survived 15" in ok.stdout, ok.stderr
    bad = subprocess.run([sys.executable, "-c", code, "16"], cwd=H.ROOT, env=env, capture_output=True, text=True)
    assert bad.returncode == -11, (bad.returncode, bad.stdout, bad.stderr)
