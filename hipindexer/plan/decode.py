"""Launch planning for paged decode, in pure Python from host shapes (graph-safe).

``plan_decode`` sees (B, next_n, H, D, block_size, max_model_len), the cache
layout, a ``Target`` and the caller's forced choices, and returns a
``DecodePlan``: the kernel, a grid of B * split_kv units and the figures the
kernel works with. Nothing depends on values in device memory: the kernel
balances a batch's real work across those units itself, from the lengths it
reads (hsaco_src/common/decode_work.h), so one plan serves every step of a
captured graph whatever its context lengths.

Fast paths register with ``register_decode`` (arch -> specs, tried in order
before the generic kernel), as prefill's do with ``register_prefill``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from ..catalog import ACCUMULATION
from .menu import CatalogFacts, KernelMenu
from .target import Target


@dataclass(frozen=True)
class DecodeKernelSpec(CatalogFacts):
    """How to plan for a decode kernel; its block, variant define, the shapes it serves (H, D, block sizes,
    layouts) and its class are its catalog entry's."""
    key: str
    units_per_cu: int = 8      # the default grid: about this many units per CU (SM), fewer for short contexts
    head_pass: int = 16        # (row, head) pairs computed per pass over a staged key tile
    persistent: bool = False   # one unit per block, the default grid one block per CU (SM): a unit's piece of the
                               # batch is already balanced on the device, so more units than CUs only add waves
    stage_keys: int = 0        # keys a unit stages at once, when fixed (0: the generic kernel's tile_keys)
    # MFMA kernels (page > 0): each of a unit's `waves` waves computes `page` keys at a time for every head
    # of every live row, and `resident` maps H to the units a CU holds at once (the smaller of what its
    # VGPRs and its LDS allow; tests/test_decode_plan.py checks it against the built code objects).
    page: int = 0
    waves: int = 1
    resident: tuple = ()       # ((H, units per CU), ...)
    # Kernels that deal the tail of a batch's work to the units that come free first (DecodeTmaParams): its share
    # of the work in 1024ths, and a chunk's work at least in block prices (decode_common.h, block_price).
    deal_share: int = 0
    deal_grain: int = 0

    @property
    def kv_map(self) -> bool:
        """Takes DecodeTmaParams: keys copied through a tensor map of the cache (hipindexer.ops.kv_map)."""
        return self.kernel.params == "DecodeTmaParams"

    def refuses(self, H: int, D: int, block_size: int, preshuffle: bool) -> str | None:
        k = self.kernel
        if ((k.fits and (H, D) in k.fits) or (not k.fits and (k.max_dim is None or D <= k.max_dim))) and \
                (not k.block_sizes or block_size in k.block_sizes) and bool(preshuffle) in k.layouts:
            return None
        return f"does not serve H={H}, D={D}, block_size={block_size}, preshuffle={bool(preshuffle)}"

    def serves(self, H: int, D: int, block_size: int, preshuffle: bool) -> bool:
        return self.refuses(H, D, block_size, preshuffle) is None

    def resident_waves_per_simd(self, H: int) -> float:
        """Waves per SIMD (4 SIMDs per CU) when a CU holds as many of this kernel's units as it can."""
        return dict(self.resident)[H] * self.waves / 4

    def pairs_per_pass(self, D: int) -> int:
        """(row, head) pairs a pass computes (the generic kernel's hx_tiling): head_pass, halved until their
        f32 queries fit head_pass x 128 floats."""
        if self.stage_keys:
            return self.head_pass
        p = self.head_pass
        while p > 2 and p * D > self.head_pass * 128:
            p //= 2
        return p

    def tile_keys(self, block_size: int, D: int) -> int:
        """Keys a unit stages per tile (the generic kernel's hx_tiling): its shared key rows hold 128 keys
        of D = 128 padded by 16 bytes, whole 16-key groups, whole blocks when a block fits."""
        if self.stage_keys:
            return self.stage_keys
        kt = min(self.block, self.block * 144 // (D + 16))
        kt -= kt % 16
        return (kt // block_size) * block_size if block_size <= kt else kt


# hsaco_src/generic/paged_mqa_logits.hip: one key per thread, 128 keys per tile (D <= 128), 16 (row, head)
# pairs per pass; fp32 FMAs.
GENERIC_DECODE = DecodeKernelSpec("paged_mqa_logits_generic")
# sm_90a fp8 wgmma on the tensor copy engine (hsaco_src/sm90a/paged_mqa_logits_wgmma_tma.hip): 64-key stages of
# whole blocks (16 or 64 tokens, either layout) landing in the operand layouts, three math warpgroups, up to 128
# (row, head) pairs per MMA pass; one unit per SM by default. Its tensor map (hipindexer/ops/kv_map.py) is uploaded
# on a cache's first call, which therefore has to come before a graph capture.
# It can deal the tail of a batch's work (off unless asked: each chunk costs its unit about as much as the deal saves;
# docs/benchmarks.md, "The dealt tail"), in chunks of at least 2,048 keys (32 blocks of 64, 128 of 16) while memory
# sets the pace.
WGMMA_TMA_DECODE_SM90 = DecodeKernelSpec("paged_mqa_logits_wgmma_tma", units_per_cu=1, head_pass=128,
                                         persistent=True, stage_keys=64, deal_share=0, deal_grain=256)
DECODE = KernelMenu("decode", GENERIC_DECODE)
DECODE_TUNABLES = ("kernel", "deal_share", "deal_grain")
# A grid's units as blocks of threads: AMD counts the grid in threads (< 2^32), so that bounds it everywhere.
GRID_THREADS = (1 << 32) - 1
# Resident waves per SIMD the MFMA kernels' default grid aims at: this memory-bound op's time is flat between
# 2 and 2.5 and rises steeply either side (measured on an MI355X by the FlyDSL paged kernel's authors).
WAVES_PER_SIMD = 2.5


def register_decode(arch: str, spec: DecodeKernelSpec) -> None:
    """Add a fast decode kernel for `arch`, tried after those registered before it."""
    DECODE.register(arch, spec)


register_decode("sm_90a", WGMMA_TMA_DECODE_SM90)
# gfx950 scaled-MFMA kernels (hsaco_src/gfx950/paged_mqa_logits_mfma.hip): 4 waves per unit, 64-key pages, every
# live row's Q in LDS (8 rows x H x 128 bytes: 66 KiB at H = 64, so 2 units per CU; at H = 32 the LDS would allow
# 4, the VGPRs (over 168) allow 2).
# Block sizes that are powers of two >= 16 in both layouts, and block_size 1 (its own build).
MFMA_DECODE_GFX950 = DecodeKernelSpec("paged_mqa_logits_mfma", page=64, waves=4, resident=((32, 2), (64, 2)),
                                      head_pass=0)
MFMA_DECODE_BS1_GFX950 = replace(MFMA_DECODE_GFX950, key="paged_mqa_logits_mfma_bs1")
register_decode("gfx950", MFMA_DECODE_GFX950)
register_decode("gfx950", MFMA_DECODE_BS1_GFX950)


@dataclass(frozen=True)
class DecodePlan:
    kernel: str
    grid: tuple             # (units, 1, 1)
    block: int
    split_kv: int           # units per sequence: units = B * split_kv (persistent kernels by default:
                            # units <= B * split_kv, one per CU)
    units: int
    tile: int               # keys a unit stages at once
    head_pass: int          # (row, head) pairs per pass over a staged tile
    key_reads: int          # times each key is read from memory per call
    variant: dict | None = None
    accumulation: str = "fp32"
    deal_share: int = 0     # 1024ths of the batch's work dealt at the end to units that come free (0: none)
    deal_grain: int = 0     # a dealt chunk's work at least

    @property
    def eps(self) -> float:
        """The gate's per-element bound for this kernel: |out - ref| <= eps * A."""
        return ACCUMULATION[self.accumulation]


def _pick(arch: str, H: int, D: int, block_size: int, preshuffle: bool, forced: str | None,
          accumulation: str) -> DecodeKernelSpec:
    if D % 16:
        raise ValueError(f"q: D must be a multiple of 16 for every kernel, got D={D}")
    spec = DECODE.pick(arch, forced, accumulation, lambda s: s.refuses(H, D, block_size, preshuffle))
    if spec is GENERIC_DECODE and D > spec.kernel.max_dim:
        raise ValueError(f"q: D={D} is past the generic decode kernel's {spec.kernel.max_dim}")
    return spec


def plan_decode(B: int, next_n: int, H: int, D: int, block_size: int, max_model_len: int, target: Target, *,
                preshuffle: bool = False, accumulation: str = "fast", kernel: str | None = None,
                split_kv: int | None = None, deal_share: int | None = None,
                deal_grain: int | None = None) -> DecodePlan:
    """Plan one fp8_paged_mqa_logits launch (B >= 1).

    Grid: B * split_kv units of one block each. split_kv=None lets the planner choose about
    ``units_per_cu`` units per CU, no more than a sequence of max_model_len keys has tiles; an explicit
    split_kv is honoured exactly. However many units there are, the kernel shares the batch's real work
    among them evenly (each key block weighted by its sequence's live rows), so split_kv sets the grain,
    not which sequence a unit serves. A persistent kernel (sm_90a's paged_mqa_logits_wgmma_tma) gets one unit
    per SM by default (fewer when the batch has fewer tiles), split_kv then reporting ceil(units / B).

    Keys are read from memory once per call for any next_n x H x D: a unit stages a tile of keys in shared
    memory (generic kernel: up to 128 keys x (D + 16) bytes, 18 KiB; D <= 1024) and every live row's every
    head is computed from it there, ``head_pass`` (row, head) pairs at a time (generic: with their queries
    staged as f32, 16 x D x 4 bytes; wgmma: one MMA of up to 128 pairs). Rows past next_n_lens[b] do no
    work beyond their -inf fill.

    The kernel, unless forced: on sm_90a paged_mqa_logits_wgmma_tma (fp8 tensor cores, keys by the tensor
    copy engine) at H in {32, 64}, D = 128, block_size 16 or 64, either layout, under accumulation="fast"; the
    generic kernel otherwise.
    accumulation: "fast" takes the fastest kernel serving the shape whatever its accumulation class,
    "fp32" only fp32-class kernels (see hipindexer.catalog.ACCUMULATION).

    >>> from hipindexer.plan import TARGETS
    >>> plan_decode(64, 2, 64, 128, 64, 131072, TARGETS["sm_90a"]).kernel
    'paged_mqa_logits_wgmma_tma'
    >>> plan_decode(64, 2, 64, 128, 64, 131072, TARGETS["sm_90a"], accumulation="fp32").kernel
    'paged_mqa_logits_generic'

    Dealing (sm_90a's kernel, off by default): with deal_share > 0 each unit first takes its share of all but
    the last deal_share / 1024 of the batch's work, then claims chunks of that tail (at least deal_grain block
    prices each) as it comes free, so units that stream at different rates end together (docs/ops.md, "The
    dealt tail", says which launches may share a stream's counters). None takes the kernel's default. Kernels
    that do not deal refuse a nonzero deal_share.
    """
    return _plan_decode(B, next_n, H, D, block_size, max_model_len, target, bool(preshuffle), accumulation,
                        kernel, split_kv, deal_share, deal_grain)


@lru_cache(maxsize=256)
def _plan_decode(B, next_n, H, D, block_size, max_model_len, target, preshuffle, accumulation, kernel,
                 split_kv, deal_share=None, deal_grain=None) -> DecodePlan:
    for name, v, lo in (("B", B, 1), ("next_n", next_n, 1), ("H", H, 1), ("block_size", block_size, 1),
                        ("max_model_len", max_model_len, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{name}: expected an int >= {lo}, got {v!r}")
    if next_n > 8:
        raise ValueError(f"next_n: expected 1..8, got {next_n}")
    spec = _pick(target.arch, H, D, block_size, preshuffle, kernel, accumulation)
    tile = spec.page or spec.tile_keys(block_size, D)
    max_split = GRID_THREADS // spec.block // B
    tiles = -(-max_model_len // tile)
    units = None
    if split_kv is None and spec.persistent:
        units = max(1, min(spec.units_per_cu * target.num_cus, B * tiles))
        split_kv = -(-units // B)
    elif split_kv is None and spec.page:
        split_kv = _mfma_split(spec, B, H, max_model_len, target, max_split)
    elif split_kv is None:
        split_kv = max(1, min(-(-spec.units_per_cu * target.num_cus // B), tiles, max_split))
    if isinstance(split_kv, bool) or not isinstance(split_kv, int) or not 1 <= split_kv <= max_split:
        raise ValueError(f"split_kv: expected an int in [1, {max_split}] (B={B} sequences x split_kv units of "
                         f"{spec.block} threads stay under 2^32 threads), got {split_kv!r}")
    units = units or B * split_kv
    variant = {spec.variant: H} if spec.variant else None
    head_pass = H if spec.page else spec.pairs_per_pass(D)
    share, grain = _deal(spec, block_size, deal_share, deal_grain)
    return DecodePlan(spec.key, (units, 1, 1), spec.block, split_kv, units, tile, head_pass, 1, variant,
                      spec.accumulation, share, grain)


def deal_tunables(text: str | None) -> dict:
    """The op's deal tunables from "SHARE" or "SHARE:GRAIN" (the benchmarks' spelling); {} for None or "".
    ValueError when a part is not an integer."""
    share, _, grain = (text or "").partition(":")
    return ({"deal_share": int(share)} if share else {}) | ({"deal_grain": int(grain)} if grain else {})


def _deal(spec: DecodeKernelSpec, block_size: int, share, grain) -> tuple:
    """(deal_share, deal_grain) of a launch: the kernel's defaults (the grain priced for 64-key blocks, so as many
    keys at smaller blocks), or the caller's where given."""
    for name, v, hi in (("deal_share", share, 1024), ("deal_grain", grain, (1 << 31) - 1)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= hi):
            raise ValueError(f"{name}: expected None or an int in [0, {hi}], got {v!r}")
    share = spec.deal_share if share is None else share
    if share and not spec.deal_grain:
        raise ValueError(f"deal_share: {spec.key} does not deal its work (only 0 or None)")
    if not share:
        return 0, 0
    grain = spec.deal_grain * max(1, spec.stage_keys // block_size) if grain is None else grain
    if grain < 1:
        raise ValueError(f"deal_grain: expected an int >= 1 when work is dealt, got {grain!r}")
    return share, grain


def _mfma_split(spec: DecodeKernelSpec, B: int, H: int, max_model_len: int, target: Target, max_split: int) -> int:
    """Units per sequence for an MFMA kernel: a grid of WAVES_PER_SIMD resident waves per SIMD (no more than
    the kernel's occupancy lets a CU hold), no more units than give each wave one page of a sequence of
    max_model_len keys, at least one unit per sequence."""
    waves = min(WAVES_PER_SIMD, spec.resident_waves_per_simd(H))
    units = int(waves * 4 * target.num_cus / spec.waves)
    pages = -(-max_model_len // spec.page)
    per_seq = max(1, -(-pages // spec.waves))  # units per sequence that still give every wave a page
    return max(1, min(round(units / B), per_seq, max_split))
