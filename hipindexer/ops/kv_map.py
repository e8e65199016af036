"""The tensor map through which the sm_90a decode kernel paged_mqa_logits_wgmma_tma copies a paged cache's keys.

The kernel's copy engine (TMA) reads a block's keys through a CUtensorMap that the host encodes once per cache
(its address, block count, block size and layout) and keeps; each launch carries it by value in its parameter
struct (DecodeTmaParams.kv_map, DecodeTopkParams.kv_map), where the copy engine may read it with no fence (a map in
global memory needs each CTA to acquire it first, which stalls the SM for microseconds), and nothing is uploaded.

Block-flat: [num_blocks][rows][D bytes] in the 128-byte swizzle, one box a block: the whole page where it is whole
D-byte rows (block_size 64 at D = 128: 66 rows, the scales in the last two), else its keys. Preshuffled,
unswizzled: a 16-token group holds chunk c (16 bytes) of its tokens 8h..8h+7 in 128 contiguous bytes at
256 c + 128 h, so the map walks (those 128 bytes, chunk c, half h, group g, block), one box a block's keys,
which lands group g's half h at 2048 g + 1024 h and chunk c at 128 c within it: the MMA's core matrices
(hsaco_src/sm90a/decode_tma_loader.h, copy_keys). The copy engine reads the cache in 128-byte runs either way.
"""
from __future__ import annotations

_MAPS: dict = {}  # (device, address, num_blocks, block_size, D, preshuffle) -> the map's 128 bytes


def map_geometry(num_blocks: int, block_size: int, D: int, preshuffle: bool):
    """(dims, byte strides of dims 1.., box, 128-byte swizzle) of the cache's tensor map, innermost first."""
    page = block_size * (D + 4)
    if preshuffle:  # (8 tokens x 16 bytes, D / 16 chunks, 2 halves, block_size / 16 groups, blocks): a box a block
        groups = block_size // 16
        return ((128, D // 16, 2, groups, num_blocks), (256, 128, 16 * D, page), (128, D // 16, 2, groups, 1), False)
    # (D bytes, rows, blocks): the whole page where it is whole rows (its scales ride along), else its keys
    rows = page // D if page % D == 0 else block_size
    return (D, rows, num_blocks), (D, page), (D, rows, 1), True


def kv_map(device, address: int, num_blocks: int, block_size: int, D: int, preshuffle: bool) -> bytes:
    """The 128 bytes of the tensor map of the cache at `address`, encoded on first use."""
    key = (device, address, num_blocks, block_size, D, preshuffle)
    m = _MAPS.get(key)
    if m is None:
        m = _MAPS[key] = device.tensor_map_u8(address, *map_geometry(num_blocks, block_size, D, preshuffle))
    return m


def kv_map_finder(device, num_blocks: int, block_size: int, D: int, preshuffle: bool):
    """f(address) -> kv_map(...) for caches of one shape, with its own address lookup (the hot path's one dict
    access)."""
    found: dict[int, bytes] = {}

    def find(address: int) -> bytes:
        m = found.get(address)
        if m is None:
            m = found[address] = kv_map(device, address, num_blocks, block_size, D, preshuffle)
        return m
    return find
