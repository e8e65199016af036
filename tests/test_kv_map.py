"""The tensor map of a paged cache (hipindexer/ops/kv_map.py), replayed on the host: the boxes the sm_90a tensor-copy
decode kernel asks for land every key byte where its MMA operand layout reads it (CPU only)."""
import numpy as np
import pytest

from hipindexer.cache import shuffle_cache
from hipindexer.ops.kv_map import map_geometry

D = 128


def _box(cache_bytes: np.ndarray, strides, box, coord, block: int, page: int) -> np.ndarray:
    """The bytes of the box at `coord` (innermost first, the block coordinate last) in the order the copy engine
    writes them: element 0 fastest."""
    inner = box[:-1]
    grid = np.indices(inner[::-1]).reshape(len(inner), -1)[::-1].T + np.asarray(coord[:-1])  # dim 0 fastest
    offs = block * page + grid[:, 0] + (grid[:, 1:] * np.asarray(strides[: len(inner) - 1])).sum(1)
    return cache_bytes[offs]


def _swizzle128(n: int) -> np.ndarray:
    o = np.arange(n)
    return o ^ (((o >> 7) & 7) << 4)


@pytest.mark.parametrize("block_size", [16, 64])
@pytest.mark.parametrize("preshuffle", [False, True])
def test_every_key_lands_where_the_mma_reads_it(block_size, preshuffle):
    rng = np.random.default_rng(block_size + preshuffle)
    nb = 3
    flat = rng.integers(0, 256, (nb, block_size, D + 4), dtype=np.uint8)
    cache = shuffle_cache(flat, D) if preshuffle else flat
    page = block_size * (D + 4)
    keys = flat.reshape(nb, -1)[:, : block_size * D].reshape(nb, block_size, D)
    scales = flat.reshape(nb, -1)[:, block_size * D:]
    dims, strides, box, sw = map_geometry(nb, block_size, D, preshuffle)
    assert sw == (not preshuffle) and len(strides) == len(dims) - 1 and all(s % 16 == 0 for s in strides)
    src = cache.reshape(-1)
    b = 1
    if preshuffle:  # one box a block, its keys' bytes in 128-byte runs of the cache
        assert box[0] == 128 and np.prod(box) == block_size * D
        smem = _box(src, strides, box, (0, 0, 0, 0, b), b, page)
        t, c, x = np.meshgrid(np.arange(block_size), np.arange(D // 16), np.arange(16), indexing="ij")
        where = (t // 8) * 1024 + c * 128 + (t % 8) * 16 + x  # core matrix (t / 8, c): K stride 128, M stride 1024
        assert np.array_equal(smem[where], keys[b][t, 16 * c + x])
    else:  # one box a block, written dense and swizzled by shared address
        dense = _box(src, strides, box, (0, 0, b), b, page)
        smem = np.empty_like(dense)
        smem[_swizzle128(dense.size)] = dense
        t, c, x = np.meshgrid(np.arange(block_size), np.arange(D // 16), np.arange(16), indexing="ij")
        assert np.array_equal(smem[t * 128 + ((c ^ (t % 8)) * 16) + x], keys[b][t, 16 * c + x])
        if box[1] * D == page:  # the whole page: the scales in the rows after the keys, read as the kernel does
            k = np.arange(block_size)
            at = block_size * D + (k // 32) * 128 + ((((k % 32) // 4) ^ (k // 32)) << 4) + (k & 3) * 4
            got = smem[at[:, None] + np.arange(4)]
            assert np.array_equal(got, scales[b].reshape(block_size, 4))
