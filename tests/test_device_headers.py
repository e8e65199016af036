"""hsaco_src/common headers compiled as host C++: fp8 decode and index math
against Python models (the same code the kernels run)."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = r"""
#include <stdio.h>
#include <initializer_list>
#include "index_math.h"
int main() {
  for (int b = 0; b < 256; ++b) printf("%08x\n", hx_f32_to_bits(hx_fp8e4m3_to_f32((hx_u8)b)));
  const int v[] = {-2147483647 - 1, -5, -1, 0, 1, 3, 7, 9, 100, 2147483647};
  for (int ks : v) for (int ke : v) for (int n : {0, 1, 7, 100, 2147483647}) {
    hx_range r = hx_clamp_window(ks, ke, n);
    printf("W %d %d %d %d %d\n", ks, ke, n, r.lo, r.hi);
  }
  for (int t0 : {0, 5, 2147483000}) for (int len : {0, 1, 7, 64, 647}) for (int parts : {1, 3, 8, 64}) for (int s = 0; s < parts; ++s) {
    hx_range r = hx_split_part(t0, t0 + len, parts, s);
    printf("S %d %d %d %d %d %d\n", t0, len, parts, s, r.lo, r.hi);
  }
  for (int c : {0, 1, 5, 100}) for (int live : {0, 1, 4}) for (int j = 0; j < 4; ++j) for (int mml : {0, 3, 100})
    printf("D %d %d %d %d %d\n", c, live, j, mml, hx_decode_valid_cols(c, live, j, mml));
  return 0;
}
"""


@pytest.fixture(scope="module")
def output(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("no host C++ compiler")
    d = tmp_path_factory.mktemp("hdr")
    (d / "p.cpp").write_text(PROGRAM)
    exe = d / "p"
    subprocess.run(["g++", "-std=c++17", "-O1", "-Wall", "-Werror", "-I", str(ROOT / "hsaco_src" / "common"),
                    str(d / "p.cpp"), "-o", str(exe)], check=True)
    return subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()


def test_fp8_e4m3fn_decode_is_exact(output):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    np = pytest.importorskip("numpy")
    got = np.array([int(x, 16) for x in output[:256]], dtype=np.uint32).view(np.float32)
    want = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    nan = np.isnan(want)
    assert list(np.flatnonzero(nan)) == [0x7F, 0xFF] and np.isnan(got[nan]).all()
    assert (got[~nan].view(np.uint32) == want[~nan].view(np.uint32)).all()  # bitwise: keeps -0
    assert got[0x7E] == 448.0 and got[0x01] == 2.0 ** -9


def test_clamp_window(output):
    for line in (ln for ln in output if ln.startswith("W ")):
        ks, ke, n, lo, hi = map(int, line.split()[1:])
        valid = [c for c in range(max(ks, 0), min(ke, n))] if min(ke, n) - max(ks, 0) < 1000 else None
        assert 0 <= lo <= hi <= n, line
        if valid is not None:
            assert hi - lo == len(valid) and (not valid or (lo, hi - 1) == (valid[0], valid[-1])), line
        else:
            assert (lo, hi) == (max(ks, 0), min(ke, n)), line


def test_split_parts_are_floor_based_and_cover_the_range(output):
    groups = {}
    for line in (ln for ln in output if ln.startswith("S ")):
        t0, ln_, parts, s, lo, hi = map(int, line.split()[1:])
        assert (lo, hi) == (t0 + s * ln_ // parts, t0 + (s + 1) * ln_ // parts), line
        groups.setdefault((t0, ln_, parts), []).append((lo, hi))
    for (t0, ln_, parts), rs in groups.items():
        assert rs[0][0] == t0 and rs[-1][1] == t0 + ln_
        assert all(a[1] == b[0] for a, b in zip(rs, rs[1:]))
        assert max(h - l for l, h in rs) - min(h - l for l, h in rs) <= 1


def test_decode_causal_bound(output):
    for line in (ln for ln in output if ln.startswith("D ")):
        c, live, j, mml, got = map(int, line.split()[1:])
        want = sum(1 for n in range(mml) if n <= c - live + j)
        assert got == want, line
