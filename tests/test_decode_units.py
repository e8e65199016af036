"""hsaco_src/common decode headers compiled as host C++ (the code the kernels run): the paged cache's
byte offsets against hipindexer.cache, and the units' shares of a batch (decode_work.h, walked by hx_decode_walk as the kernels walk it): every key block and every fill
column of every sequence owned by exactly one unit, each unit's work within one block of an equal share,
for any lengths the device may hold."""
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hipindexer import cache

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = r"""
#include <stdio.h>
#include "decode_work.h"
#include "paged_cache.h"
struct Params {  // the fields hx_decode_walk reads of a decode parameter struct
  const hx_i32* context_lens;
  const hx_i32* next_n_lens;
  hx_i32 lens_per_row, B, next_n, max_model_len, block_size;
};
int main() {
  char what[16];
  while (scanf("%15s", what) == 1) {
    if (what[0] == 'O') {  // offsets: O block_size D
      int bs, D;
      scanf("%d %d", &bs, &D);
      for (int t = 0; t < bs; ++t) for (int d = 0; d < D; ++d)
        printf("%lld %lld\n", hx_flat_key_offset(t, d, D), bs % 16 ? -1LL : hx_preshuffled_key_offset(t, d, D));
      for (int t = 0; t < bs; ++t) printf("%lld\n", hx_scale_offset(bs, D, t));
      printf("%lld\n", hx_block_bytes(bs, D));
      continue;
    }
    // units: U next_n mml bs units block B then B pairs (ctx, live) (block <= 8); prints each unit's pieces of each sequence they
    // meet: K unit b blocks, F unit b fill columns
    int next_n, mml, bs, units, block, B;
    scanf("%d %d %d %d %d %d", &next_n, &mml, &bs, &units, &block, &B);
    hx_i32 ctx[512], live[512];
    for (int b = 0; b < B; ++b) scanf("%d %d", &ctx[b], &live[b]);
    long long work = 0, fill = 0;
    for (int b = 0; b < B; ++b) {
      hx_decode_seq s = hx_decode_sequence(ctx[b], live[b], next_n, mml, bs);
      printf("S %d %d %d %d %d\n", s.live, s.keys, s.blocks, s.fill_from, (int)s.malformed);
      work += hx_decode_work(s);
      fill += hx_decode_fill(s, mml);
    }
    // the kernels' walk (hx_decode_walk) by thread 0 of a unit of `block` threads, chunks of `block` sequences:
    // at a chunk's second barrier the other threads' sequences are in scan[] as well, as they would have put them
    const Params p = {ctx, live, 0, B, next_n, mml, bs};
    for (int u = 0; u < units; ++u) {
      hx_range64 w = hx_balanced_part(work, units, u), f = hx_balanced_part(fill, units, u);
      hx_i64 scan[2 * 8];
      int meetings = 0;
      auto barrier = [&] {
        if (++meetings % 2) return;
        const int b0 = (meetings / 2 - 1) * block;
        for (int t = 1; t < block; ++t) {
          const int b = b0 + t;
          const hx_decode_seq s = b < B ? hx_decode_sequence(ctx[b], live[b], next_n, mml, bs) : hx_decode_seq{};
          scan[t] = b < B ? hx_decode_work(s) : 0;
          scan[block + t] = b < B ? hx_decode_fill(s, mml) : 0;
        }
      };
      hx_decode_walk(
          p, 0, block, w, f, scan, barrier,
          [&](hx_i32 b, const hx_decode_seq&, hx_range k) { printf("K %d %d %d %d\n", u, b, k.lo, k.hi); },
          [&](hx_i32 b, hx_range c) { printf("F %d %d %d %d\n", u, b, c.lo, c.hi); });
    }
    printf("E\n");
    fflush(stdout);
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("no host C++ compiler")
    d = tmp_path_factory.mktemp("decode_hdr")
    (d / "p.cpp").write_text(PROGRAM)
    exe = d / "p"
    subprocess.run(["g++", "-std=c++17", "-O1", "-Wall", "-Werror", "-Wno-unused-result",
                    "-I", str(ROOT / "hsaco_src" / "common"), str(d / "p.cpp"), "-o", str(exe)], check=True)
    return lambda text: subprocess.run([str(exe)], input=text, check=True, capture_output=True,
                                       text=True).stdout.splitlines()


@pytest.mark.parametrize("bs,D", [(16, 16), (16, 64), (64, 128), (32, 256), (1, 64), (7, 128)])
def test_cache_offsets_match_the_numpy_layouts(probe, bs, D):
    lines = probe(f"O {bs} {D}\n")
    keys = np.array([ln.split() for ln in lines[:bs * D]], np.int64)
    np.testing.assert_array_equal(keys[:, 0], np.arange(bs * D))
    if bs % 16 == 0:
        np.testing.assert_array_equal(keys[:, 1], cache._shuffled_key_order(bs, D))
    scales = np.array(lines[bs * D: bs * D + bs], np.int64)
    np.testing.assert_array_equal(scales, bs * D + 4 * np.arange(bs))
    block = int(lines[-1])
    assert block == bs * (D + 4) and (block % 16 == 0) == (bs % 4 == 0)


LENGTH = st.one_of(st.integers(0, 3000), st.integers(-5, -1), st.sampled_from([2**31 - 1, 2**30]))


@settings(deadline=None, derandomize=True, max_examples=120)
@given(st.integers(1, 8), st.integers(1, 5000), st.sampled_from([1, 2, 7, 16, 64]), st.integers(1, 40), st.data())
def test_every_block_and_fill_column_has_exactly_one_unit(probe, next_n, mml, bs, units, data):
    B, block = data.draw(st.integers(1, 12)), data.draw(st.sampled_from([1, 3, 8]))
    seqs = [(data.draw(LENGTH), data.draw(st.one_of(st.integers(0, next_n), st.integers(-2, 10)))) for _ in range(B)]
    text = f"U {next_n} {mml} {bs} {units} {block} {B} " + " ".join(f"{c} {lv}" for c, lv in seqs) + "\n"
    lines = probe(text)
    descs = [tuple(map(int, ln.split()[1:])) for ln in lines if ln.startswith("S ")]
    blocks_of = [tuple(map(int, ln.split()[1:])) for ln in lines if ln.startswith("K ")]
    fill_of = [tuple(map(int, ln.split()[1:])) for ln in lines if ln.startswith("F ")]
    work = np.zeros(units, np.int64)
    for b, ((ctx, live_in), (live, keys, blocks, fill_from, malformed)) in enumerate(zip(seqs, descs)):
        bad = ctx < 0 or not 0 <= live_in <= next_n
        assert malformed == bad and live == (0 if bad else live_in)
        assert keys == (min(ctx, mml) if live > 0 else 0) and blocks == -(-keys // bs)
        assert fill_from == min(mml, blocks * bs)
        owned_blocks = np.zeros(blocks, np.int64)
        owned_cols = np.zeros(mml, np.int64)
        for u, bb, klo, khi in blocks_of:
            if bb == b:
                assert 0 <= klo <= khi <= blocks or klo >= khi
                owned_blocks[klo:khi] += 1
                work[u] += max(0, khi - klo) * live
        for u, bb, clo, chi in fill_of:
            if bb == b:
                assert fill_from <= clo and chi <= mml
                owned_cols[clo:chi] += 1
        assert (owned_blocks == 1).all(), (b, owned_blocks)
        assert (owned_cols[fill_from:] == 1).all() and (owned_cols[:fill_from] == 0).all()
    total, most = int(work.sum()), max([d[0] for d in descs] + [1])
    assert work.max() <= -(-total // units) + most - 1 and work.min() >= total // units - most + 1
