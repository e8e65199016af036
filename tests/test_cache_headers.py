"""hsaco_src/common/fp8_quant.h and paged_cache.h compiled as host C++ against numpy: the f32 -> e4m3fn
rounding (exhaustive around every rounding boundary, a stride through every float32 up to past 448), the
row scale (hipindexer.cache.quantize_keys' amax / 448 and its power-of-two rounding, subnormals included),
the float16 / bfloat16 decode of every code, and the preshuffled key offset. The kernels include these
same headers; the emulator and the GPU tests check them again inside the kernels."""
import ctypes
import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from hipindexer import cache
from hipindexer.arguments import FP8
from hipindexer.check.cache import fp8_boundaries

ROOT = Path(__file__).resolve().parents[1]

SOURCE = r"""
#include "fp8_quant.h"
#include "paged_cache.h"
extern "C" {
void to_e4m3(const float* x, unsigned char* out, long n) {
  for (long i = 0; i < n; ++i) out[i] = (unsigned char)hx_f32_to_e4m3_sat(x[i]);
}
void to_e4m3x4(const float* x, unsigned* out, long n4) {
  for (long i = 0; i < n4; ++i) out[i] = hx_f32x4_to_e4m3_sat(x + 4 * i);
}
void scales(const unsigned* amax_bits, float* out, long n, int pow2) {
  for (long i = 0; i < n; ++i) out[i] = hx_key_scale(amax_bits[i], pow2 != 0);
}
void reciprocals(const float* scale, float* out, long n) {
  for (long i = 0; i < n; ++i) out[i] = hx_exact_reciprocal(scale[i]);
}
void halves(const unsigned short* h, float* out, long n, int bf16) {
  for (long i = 0; i < n; ++i) out[i] = bf16 ? hx_bf16_to_f32(h[i]) : hx_f16_to_f32(h[i]);
}
void shuffled(int bs, int D, long long* out) {
  for (int t = 0; t < bs; ++t)
    for (int d = 0; d < D; ++d) out[(long)t * D + d] = hx_key_offset(true, t, d, D);
}
}
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("no host C++ compiler")
    d = tmp_path_factory.mktemp("quant")
    (d / "q.cpp").write_text(SOURCE)
    so = d / "q.so"
    subprocess.run(["g++", "-std=c++17", "-O2", "-fPIC", "-shared", "-Wall", "-Werror",
                    "-I", str(ROOT / "hsaco_src" / "common"), str(d / "q.cpp"), "-o", str(so)], check=True)
    return ctypes.CDLL(str(so))


def _p(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def _codes(lib, x):
    x = np.ascontiguousarray(x, np.float32)
    out = np.empty(x.size, np.uint8)
    lib.to_e4m3(_p(x), _p(out), ctypes.c_long(x.size))
    return out


def _numpy_codes(x):
    return np.clip(x, -448, 448).astype(FP8).view(np.uint8)  # what cache.quantize_keys does after the division


def _assert_codes(lib, x):
    got, want = _codes(lib, x), _numpy_codes(x)
    bad = np.flatnonzero(got != want)
    assert not bad.size, f"{bad.size} codes differ, e.g. {x[bad[0]]!r} ({x[bad[:1]].view(np.uint32)[0]:#x}): " \
                         f"{got[bad[0]]:#x} instead of {want[bad[0]]:#x}"


def test_every_rounding_boundary_both_signs(lib):
    b = fp8_boundaries(ulps=256)
    assert b.size > 100_000 and b.max() == 448.0
    _assert_codes(lib, np.concatenate([b, -b]))


def test_a_stride_through_every_float32_up_to_past_saturation(lib):
    bits = np.arange(0, 0x44000000, 61, dtype=np.uint32)  # 0 .. 512, every 61st pattern
    x = bits.view(np.float32)
    _assert_codes(lib, np.concatenate([x, -x]))


def test_saturation_and_zeros(lib):
    x = np.array([448, 449, 463.99, 464, 465, 1e6, 3.4e38, 0.0, -0.0, 2.0 ** -149, 2.0 ** -10, 2.0 ** -11],
                 np.float32)
    _assert_codes(lib, np.concatenate([x, -x]))
    assert _codes(lib, np.array([-0.0], np.float32))[0] == 0x80  # the sign of zero survives, as in numpy


def test_four_at_a_time_packs_value_i_in_byte_i(lib):
    x = np.random.default_rng(0).standard_normal(4096).astype(np.float32) * 100
    out = np.empty(1024, np.uint32)
    lib.to_e4m3x4(_p(x), _p(out), ctypes.c_long(1024))
    np.testing.assert_array_equal(out.view(np.uint8), _numpy_codes(x))


def _numpy_scales(amax, pow2):
    return cache.quantize_keys(amax[:, None], power_of_two=pow2)[1]


@pytest.mark.parametrize("pow2", [False, True], ids=["amax_over_448", "power_of_two"])
def test_row_scale_is_numpys(lib, pow2):
    rng = np.random.default_rng(1)
    bits = np.concatenate([rng.integers(0, 0x7F800000, 1 << 20, dtype=np.uint32),  # every finite magnitude
                           np.arange(0, 1 << 12, dtype=np.uint32),                 # the smallest subnormals
                           np.array([0x00800000, 0x007FFFFF, 0x7F7FFFFF, 0x43E00000], np.uint32)])
    amax = bits.view(np.float32)
    got = np.empty(amax.size, np.float32)
    lib.scales(_p(bits), _p(got), ctypes.c_long(bits.size), ctypes.c_int(int(pow2)))
    want = _numpy_scales(amax, pow2)
    bad = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    assert not bad.size, f"{bad.size} scales differ, e.g. amax {amax[bad[0]]!r}: {got[bad[0]]!r} vs {want[bad[0]]!r}"


def test_exact_reciprocal_only_for_powers_of_two_whose_inverse_is_normal(lib):
    s = np.concatenate([np.exp2(np.arange(-149, 128)).astype(np.float32), np.float32([3.0, 0.75, 1e-40])])
    got = np.empty(s.size, np.float32)
    lib.reciprocals(_p(s), _p(got), ctypes.c_long(s.size))
    inv = np.float64(1) / s.astype(np.float64)
    usable = (s >= 2.0 ** -126) & (inv >= 2.0 ** -126) & (np.frexp(s)[0] == 0.5)
    np.testing.assert_array_equal(got[usable], inv[usable].astype(np.float32))
    assert (got[~usable] == 0).all() and usable.sum() == 253


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
def test_every_half_code_decodes_exactly(lib, dtype):
    h = np.arange(1 << 16, dtype=np.uint16)
    got = np.empty(h.size, np.float32)
    lib.halves(_p(h), _p(got), ctypes.c_long(h.size), ctypes.c_int(int(dtype is ml_dtypes.bfloat16)))
    want = h.view(dtype).astype(np.float32)
    nan = np.isnan(want)
    assert np.isnan(got[nan]).all()
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


@pytest.mark.parametrize("bs,D", [(16, 16), (16, 128), (64, 64), (32, 48)])
def test_preshuffled_offset_is_the_numpy_layouts(lib, bs, D):
    out = np.empty(bs * D, np.int64)
    lib.shuffled(ctypes.c_int(bs), ctypes.c_int(D), _p(out))
    np.testing.assert_array_equal(out, cache._shuffled_key_order(bs, D))
