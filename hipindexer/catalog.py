"""The one declaration of every kernel parameter struct and every kernel.

From each `Struct` come both the C header that device code includes (with a
static_assert on every offset and on the size) and the ctypes mirror the
runtime packs, so the two cannot drift apart silently. Stdlib only: build.py
imports this file by path in an isolated build environment.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass, field

# kind -> (size, C spelling, ctypes type); alignment == size for all of them
_SCALARS = {
    "u8": (1, "unsigned char", ctypes.c_uint8),
    "i32": (4, "int", ctypes.c_int32),
    "u32": (4, "unsigned int", ctypes.c_uint32),
    "i64": (8, "long long", ctypes.c_int64),
    "u64": (8, "unsigned long long", ctypes.c_uint64),
    "f32": (4, "float", ctypes.c_float),
    "f64": (8, "double", ctypes.c_double),
}


@dataclass(frozen=True)
class Blob:
    """A field of opaque bytes with its own alignment: how a parameter struct carries a CUDA TMA
    descriptor (CUtensorMap: 128 bytes, 64-byte aligned), which sm_90a kernels take by value in their
    parameter struct (a __grid_constant__ parameter is where cp.async.bulk.tensor may read one)."""

    size: int
    align: int = 1


def _layout(spec):
    """(size, align, C declarator format, ctypes type) of a field spec.

    Specs: a scalar kind, "ptr" (void*), "ptr:<kind>" (typed pointer, still 8
    bytes on the host), or a Blob.
    """
    if isinstance(spec, Blob):
        return spec.size, spec.align, "alignas(%d) unsigned char {}[%d]" % (spec.align, spec.size), ctypes.c_uint8 * spec.size
    if spec == "ptr":
        return 8, 8, "void* {}", ctypes.c_uint64
    if spec.startswith("ptr:") and spec[4:] in _SCALARS:
        return 8, 8, _SCALARS[spec[4:]][1] + "* {}", ctypes.c_uint64
    if spec in _SCALARS:
        size, cname, ct = _SCALARS[spec]
        return size, size, cname + " {}", ct
    raise ValueError(f"unknown field spec {spec!r}")


class Struct:
    def __init__(self, name: str, fields):
        self.name = name
        self.fields = list(fields)
        off, align, self.offsets, self._ctfields = 0, 1, {}, []
        for fname, spec in self.fields:
            size, falign, _, ct = _layout(spec)
            pad = -off % falign
            if pad:
                self._ctfields.append((f"_pad{off}", ctypes.c_uint8 * pad))
                off += pad
            self.offsets[fname] = off
            self._ctfields.append((fname, ct))
            off += size
            align = max(align, falign)
        tail = -off % align
        if tail:
            self._ctfields.append((f"_pad{off}", ctypes.c_uint8 * tail))
        self.size, self.align = off + tail, align
        self._ctype = None

    def ctype(self):
        """ctypes.Structure with C's layout; padding is explicit because ctypes has no alignas."""
        if self._ctype is None:
            cls = type(self.name, (ctypes.Structure,), {"_pack_": 1, "_fields_": self._ctfields})
            assert ctypes.sizeof(cls) == self.size, self.name
            for fname in self.offsets:
                assert getattr(cls, fname).offset == self.offsets[fname], (self.name, fname)
            self._ctype = cls
        return self._ctype

    def pack(self, **values) -> bytes:
        """Bytes of the struct; every field must be given, padding is zero."""
        names = [f for f, _ in self.fields]
        missing = [f for f in names if f not in values]
        extra = [k for k in values if k not in self.offsets]
        if missing or extra:
            raise TypeError(f"{self.name}: missing fields {missing}, unknown fields {extra}")
        inst = self.ctype()()
        for fname, spec in self.fields:
            v = values[fname]
            if isinstance(spec, Blob):
                v = bytes(v)
                if len(v) > spec.size:
                    raise ValueError(f"{self.name}.{fname}: {len(v)} bytes > {spec.size}")
                ctypes.memmove(ctypes.addressof(inst) + self.offsets[fname], v, len(v))
            else:
                setattr(inst, fname, int(v) if spec.startswith("ptr") else v)
        return bytes(inst)

    def header(self) -> str:
        lines = [f"struct {self.name} {{"]
        for fname, spec in self.fields:
            lines.append("  " + _layout(spec)[2].format(fname) + ";")
        lines.append("};")
        for fname, off in self.offsets.items():
            lines.append(f"static_assert(__builtin_offsetof({self.name}, {fname}) == {off}, \"{self.name}.{fname}\");")
        lines.append(f"static_assert(sizeof({self.name}) == {self.size}, \"sizeof {self.name}\");")
        lines.append(f"static_assert(alignof({self.name}) == {self.align}, \"alignof {self.name}\");")
        return "\n".join(lines) + "\n"


# Accumulation class -> eps of the gate's per-element bound |out - ref| <= eps * A (hipindexer.gate).
# fp32: CUDA-core FMA or the gfx950 MFMAs, which keep every product exactly and add in float32.
# fp8_tc: Hopper fp8 wgmma, which aligns the products of each k32 step and truncates them to about 13 bits.
ACCUMULATION = {"fp32": 2.0 ** -20, "fp8_tc": 2.0 ** -12}


@dataclass(frozen=True)
class Kernel:
    key: str  # catalog key, also the file stem of the code object
    source: str  # relative to the source root (hsaco_src/)
    symbol: str  # extern "C" name in the code object
    params: str  # Struct name
    block: int  # threads per block: launch bounds (-DHX_BLOCK) and launch
    targets: tuple = ("gfx950", "sm_90a")
    variants: tuple = field(default_factory=lambda: ({},))
    smem: int = 0  # dynamic shared memory bytes per block (-DHX_SMEM; the runtime raises the limit and launches with it)
    smem_on: tuple = ()  # ((target, bytes), ...): where a target's build takes other than smem
    block_on: tuple = ()  # ((target, threads), ...): where a target's build takes other than block
    defines: tuple = ()  # ((NAME, value), ...) for every variant: one source built as two kernels
    accumulation: str | None = None  # logits kernels: their class in ACCUMULATION (the gate's per-element eps)
    test_only: bool = False  # built for the tests into kernels/test-only/: never in a wheel or in `hipindexer info`
    # The shapes a logits kernel serves (the planners read them): (H, D) pairs, () for any H and any
    # D % 16 == 0 up to max_dim (None: no bound); paged decode also by cache block size (() any) and layout.
    fits: tuple = ()
    max_dim: int | None = None
    block_sizes: tuple = ()
    layouts: tuple = (False, True)  # preshuffle values

    def __post_init__(self):
        if self.accumulation is not None and self.accumulation not in ACCUMULATION:
            raise ValueError(f"{self.key}: accumulation class {self.accumulation!r} is not one of {list(ACCUMULATION)}")

    def smem_for(self, target: str) -> int:
        """The dynamic shared memory of the kernel's build for `target`."""
        return dict(self.smem_on).get(target, self.smem)

    def block_for(self, target: str) -> int:
        """The threads per block of the kernel's build for `target` (its manifest entry's block)."""
        return dict(self.block_on).get(target, self.block)

    @property
    def variant_axis(self) -> str | None:
        """The define its variants differ in (e.g. HX_HEADS, chosen by H at launch); None for one object."""
        names = {name for v in self.variants for name in v}
        return names.pop() if len(names) == 1 else None

    @property
    def eps(self) -> float:
        if self.accumulation is None:
            raise ValueError(f"{self.key} computes no logits: it has no accumulation class")
        return ACCUMULATION[self.accumulation]


_VARIANT_TOKEN = re.compile(r"^[A-Za-z0-9_]+$")


def variant_key(kernel: Kernel, variant: dict) -> str:
    """`key` then `.NAME-VALUE` per define, sorted: stays a plain file name."""
    parts = [kernel.key]
    for k in sorted(variant):
        v = str(variant[k])
        if not (_VARIANT_TOKEN.match(k) and _VARIANT_TOKEN.match(v)):
            raise ValueError(f"{kernel.key}: variant define {k}={v} must be [A-Za-z0-9_]")
        parts.append(f"{k}-{v}")
    return ".".join(parts)


STRUCTS = [
    Struct("FillParams", [("dst", "ptr:u32"), ("value", "u32"), ("count", "u64")]),
    # Every field kind; the 64-aligned blob needs 20 bytes of padding before
    # it and fields follow it, so both inner and tail padding are exercised.
    Struct(
        "EchoParams",
        [
            ("out", "ptr:u8"),
            ("a_u8", "u8"),
            ("b_i32", "i32"),
            ("c_u32", "u32"),
            ("d_i64", "i64"),
            ("e_u64", "u64"),
            ("f_f32", "f32"),
            ("blob", Blob(size=128, align=64)),
            ("g_f64", "f64"),
            ("h_ptr", "ptr"),
            ("tail_u8", "u8"),
        ],
    ),
]
STRUCTS.append(Struct("CopyParams", [("dst", "ptr"), ("src", "ptr"), ("n16", "u64")]))
_PREFILL_FIELDS = [
    ("q", "ptr:u8"), ("k", "ptr:u8"), ("kv_scale", "ptr:f32"), ("weights", "ptr:f32"),
    ("ks", "ptr:i32"), ("ke", "ptr:i32"), ("out", "ptr:f32"),
    ("out_stride", "i64"),  # elements between rows of out (>= N)
    ("M", "i32"), ("N", "i32"), ("H", "i32"), ("D", "i32"),
    ("rows_per_block", "i32"), ("split", "i32"), ("tile", "i32"),
    ("clean", "i32"), ("reverse_rows", "i32"),
]
STRUCTS.append(Struct("PrefillParams", _PREFILL_FIELDS))
# The same unit keeping, instead of writing logits, each row's keys whose logit reaches its floor (the fused
# prefill top-k's filter, hipindexer.ops.prefill_topk_fused; out is 0): row m's keys of key-split part j as entries
# (hx_topk_entry) in its region, as many as arrive (counted past the region, stored up to it), in
# cand_counts[m split + j]; the floor of row m at floors[m floor_stride], an order key (hx_topk_key): keys whose
# logit's order key is below it stay out, and floor 0 lets every key in. Row m's regions share the entries
# [m split region, (m + 1) split region) of cand, cut among its parts by the floors: part j's first entry from the
# row's and its size at cand_base[m split + j] and cand_cap[m split + j] (common/topk_regions.h).
STRUCTS.append(Struct("PrefillTopkParams", _PREFILL_FIELDS + [
    ("cand", "ptr:u64"), ("cand_counts", "ptr:i32"), ("floors", "ptr:u32"),
    ("floor_stride", "i64"), ("region", "i32"),
    ("cand_base", "ptr:u32"), ("cand_cap", "ptr:u32"),
]))
# The fused prefill top-k's floors: a sample of the keys (every step-th, from 0) gathered with each row's window
# over it, and after the logits op has run on that sample, each row's floor: the order key of the r-th largest
# logit of its sample window, or just below it (0 when the window has at most r keys). With the floor, the row's
# cut of its parts * region entries among the filter's parts (cand_base, cand_cap [M, parts]): even (cut 0), or (1)
# by where the sample's keys at the floor lie in the parts the filter's split makes of the row block's keys
# (rows_per_block, tile; quanta: hx_prefill_split_quanta, else hx_prefill_split).
STRUCTS.append(Struct("PrefillSampleParams", [
    ("k", "ptr:u8"), ("kv_scale", "ptr:f32"), ("ks", "ptr:i32"), ("ke", "ptr:i32"),
    ("sample_k", "ptr:u8"), ("sample_scale", "ptr:f32"), ("sample_ks", "ptr:i32"), ("sample_ke", "ptr:i32"),
    ("logits", "ptr:f32"), ("floors", "ptr:u32"),
    ("cand_counts", "ptr:i32"),  # [M, parts] zeroed by the gather, for a filter that counts with global atomics
    ("M", "i32"), ("N", "i32"), ("D", "i32"), ("step", "i32"), ("samples", "i32"), ("r", "i32"), ("parts", "i32"),
    ("cand_base", "ptr:u32"), ("cand_cap", "ptr:u32"),
    ("region", "i32"), ("rows_per_block", "i32"), ("tile", "i32"), ("quanta", "i32"), ("cut", "i32"),
]))
# The fused prefill top-k's last launch: each row's kept keys (PrefillTopkParams' cand, cand_counts, floors)
# selected to its top_k and written; a row whose floor let fewer than top_k in recomputes its logits here (scalar
# fp32) and selects from them, every row of the call when recompute_all; a part whose keys passed its region
# recomputes that part's keys alone (the filter's split: rows_per_block, tile, quanta as for the floors).
# Optional arrays are 0: values, and (with recompute_all) cand, cand_counts, floors, cand_base and cand_cap.
STRUCTS.append(Struct("PrefillTopkFinishParams", [
    ("cand", "ptr:u64"), ("cand_counts", "ptr:i32"), ("floors", "ptr:u32"),
    ("q", "ptr:u8"), ("k", "ptr:u8"), ("kv_scale", "ptr:f32"), ("weights", "ptr:f32"),
    ("ks", "ptr:i32"), ("ke", "ptr:i32"), ("indices", "ptr:i32"), ("values", "ptr:f32"),
    ("floor_stride", "i64"), ("indices_stride", "i64"), ("values_stride", "i64"),  # elements between rows
    ("M", "i32"), ("N", "i32"), ("H", "i32"), ("D", "i32"), ("top_k", "i32"),
    ("parts", "i32"), ("region", "i32"), ("sorted", "i32"), ("relative", "i32"), ("recompute_all", "i32"),
    ("cand_base", "ptr:u32"), ("cand_cap", "ptr:u32"),
    ("rows_per_block", "i32"), ("tile", "i32"), ("quanta", "i32"),
]))
# gfx950 logits tile (hsaco_src/gfx950/logits_tile.hip): the first kernel on the wave primitives.
STRUCTS.append(Struct("LogitsTileParams", [
    ("q", "ptr:u8"), ("k", "ptr:u8"), ("kv_scale", "ptr:f32"), ("weights", "ptr:f32"),
    ("ks", "ptr:i32"), ("ke", "ptr:i32"), ("out", "ptr:f32"),
    ("out_stride", "i64"), ("M", "i32"), ("N", "i32"), ("H", "i32"), ("clean", "i32"),
]))
STRUCTS.append(Struct("SplitProbeParams", [
    ("ks", "ptr:i32"), ("ke", "ptr:i32"), ("owner", "ptr:i32"),
    ("M", "i32"), ("N", "i32"), ("rows_per_block", "i32"), ("split", "i32"), ("tile", "i32"), ("reverse_rows", "i32"),
]))
# The fused decode kernel's rows cut side by side (hsaco_src/generic/rows_cut_probe.hip), for the tests.
STRUCTS.append(Struct("RowsCutProbeParams", [
    ("entries", "ptr:u64"), ("counts", "ptr:i32"), ("cuts", "ptr:u64"),
    ("rows", "i32"), ("cap", "i32"), ("want", "i32"), ("passes", "i32"),
]))
# Paged decode (docs/ops.md). Optional arrays are 0: next_n_lens (every row live), errors (no flags).
_DECODE_POINTERS = [
    ("q", "ptr:u8"), ("kv_cache", "ptr:u8"), ("weights", "ptr:f32"), ("context_lens", "ptr:i32"),
    ("next_n_lens", "ptr:i32"), ("block_tables", "ptr:i32"), ("out", "ptr:f32"), ("errors", "ptr:i32"),
]
_DECODE_SHAPE = [
    ("out_stride", "i64"),  # elements between rows of out (>= max_model_len)
    ("num_blocks", "i64"),  # physical blocks in the cache: ids outside [0, num_blocks) are never read
    ("B", "i32"), ("next_n", "i32"), ("H", "i32"), ("D", "i32"), ("block_size", "i32"),
    ("max_blocks", "i32"),  # block_tables columns
    ("max_model_len", "i32"), ("clean", "i32"), ("preshuffle", "i32"),
    ("lens_per_row", "i32"),  # context_lens is [B, next_n], a length per row (else [B], with next_n_lens)
]
STRUCTS.append(Struct("DecodeParams", _DECODE_POINTERS + _DECODE_SHAPE))
# The same for a kernel that copies keys through a tensor map of the cache (hipindexer/ops/kv_map.py), carried by
# value: a map in the parameter struct needs no fence before the copy engine reads it, where one in global memory
# needs each CTA to acquire it, a fence that stalls every warp of the SM (docs/benchmarks.md). The map follows the
# per-call pointers, so one pack writes them and it.
# The logits kernel also deals the tail of a batch's work to the units that come free first: claims is a pair of
# counter words of its own (hipindexer/ops/claims.py; 0: nothing dealt), deal_share the tail's share of the work in
# 1024ths, deal_grain a chunk's work at least (block prices, hsaco_src/sm90a/decode_common.h).
TENSOR_MAP = Blob(size=128, align=64)  # CUtensorMap
STRUCTS.append(Struct("DecodeTmaParams", _DECODE_POINTERS + [("claims", "ptr:u32"), ("kv_map", TENSOR_MAP)] +
                      _DECODE_SHAPE + [("deal_share", "i32"), ("deal_grain", "i32")]))
# The same unit selecting each row's top_k instead of writing logits (hsaco_src/sm90a/paged_mqa_topk_wgmma_tma.hip;
# out is 0): the workspace of hipindexer.ops.paged_topk, parts [(units + B) x next_n x top_k] entries (a unit u's
# piece of sequence b at slot u + b), their counts, and per sequence the slots its pieces were written to.
_DECODE_TOPK_POINTERS = [("parts", "ptr:u64"), ("part_counts", "ptr:i32"), ("seq_parts", "ptr:i32"),
                         ("seq_nparts", "ptr:i32")]
STRUCTS.append(Struct("DecodeTopkParams", _DECODE_POINTERS + _DECODE_TOPK_POINTERS + [("kv_map", TENSOR_MAP)] +
                      _DECODE_SHAPE + [("top_k", "i32"),
                                       ("stages", "i32"),  # sm_90a: the ring's depth at most (the buffers take the rest)
                                       ("cap", "i32")]))  # a row's candidates on chip at most (0: what fits)
# The paged K cache's writer and reader (docs/ops.md, "The paged cache layouts"; hipindexer.ops.cache). Optional
# errors is 0 (no flags).
STRUCTS.append(Struct("CacheWriteParams", [
    ("k", "ptr"), ("kv_cache", "ptr:u8"), ("slots", "ptr"), ("errors", "ptr:i32"),
    ("num_slots", "i64"),  # num_blocks * block_size: slots outside [-1, num_slots) are never written through
    ("T", "i32"), ("D", "i32"), ("block_size", "i32"),
    ("dtype", "i32"),  # k's element type: HX_KEY_F32, HX_KEY_F16, HX_KEY_BF16 (hsaco_src/common/fp8_quant.h)
    ("slots64", "i32"),  # slot_mapping is int64 (else int32)
    ("preshuffle", "i32"), ("power_of_two", "i32"),
]))
STRUCTS.append(Struct("CacheGatherParams", [
    ("kv_cache", "ptr:u8"), ("block_tables", "ptr:i32"), ("cu_seq_lens", "ptr:i32"), ("out_k", "ptr:u8"),
    ("out_scale", "ptr:f32"), ("errors", "ptr:i32"),
    ("num_blocks", "i64"),  # block ids outside [0, num_blocks) are never read through
    ("N", "i64"),  # rows of out_k and out_scale
    ("R", "i32"), ("max_blocks", "i32"), ("D", "i32"), ("block_size", "i32"), ("preshuffle", "i32"),
]))
STRUCTS.append(Struct("WindowsParams", [
    ("query_lens", "ptr:i32"), ("context_lens", "ptr:i32"), ("ks", "ptr:i32"), ("ke", "ptr:i32"),
    ("errors", "ptr:i32"), ("M", "i32"), ("R", "i32"),
]))
# The exact top-k of a logits array (hipindexer.ops.topk). Optional arrays are 0: lengths (every column of a row
# selectable but -inf), values (indices only).
STRUCTS.append(Struct("TopkParams", [
    ("logits", "ptr:f32"), ("lengths", "ptr:i32"), ("indices", "ptr:i32"), ("values", "ptr:f32"),
    ("logits_stride", "i64"), ("indices_stride", "i64"), ("values_stride", "i64"),  # elements between rows
    ("rows", "i32"), ("N", "i32"), ("top_k", "i32"), ("sorted", "i32"),
]))
# The step kernels of the composed top-k ops (hipindexer.ops.paged_topk, prefill_topk), one launch after each key
# chunk's logits: the selection over the running candidates and the chunk, the merge into new candidates (on the
# last chunk the outputs), and the next chunk's inputs for the logits op. Optional arrays are 0: next_n_lens (every
# row live), values and slots (not asked for), rel (absolute indices; else [rows] int32 subtracted from each index
# written), cols (no filter).
# The cache slots of a selection of key positions (hsaco_src/generic/topk_slots.hip): the decode top-k's whole-row
# path, whose selection (topk_logits) knows positions only.
STRUCTS.append(Struct("TopkSlotsParams", [
    ("indices", "ptr:i32"), ("slots", "ptr:i32"), ("block_tables", "ptr:i32"),
    ("indices_stride", "i64"), ("slots_stride", "i64"),  # elements between rows
    ("num_blocks", "i64"),  # block ids outside [0, num_blocks) give -1
    ("rows", "i32"), ("top_k", "i32"), ("next_n", "i32"), ("max_blocks", "i32"), ("block_size", "i32"),
]))
STRUCTS.append(Struct("PagedTopkStepParams", [
    ("w", "ptr:f32"), ("ws", "ptr:i32"), ("indices", "ptr:i32"), ("values", "ptr:f32"), ("slots", "ptr:i32"),
    ("context_lens", "ptr:i32"), ("next_n_lens", "ptr:i32"), ("block_tables", "ptr:i32"),
    ("chunk_lens", "ptr:i32"), ("chunk_table", "ptr:i32"),
    ("w_stride", "i64"), ("ws_stride", "i64"), ("indices_stride", "i64"), ("values_stride", "i64"),
    ("slots_stride", "i64"),  # elements between rows
    ("base", "i64"), ("next_key", "i64"),  # the first key of this chunk and of the next
    ("num_blocks", "i64"),  # the cache's blocks: a slot's block id outside [0, num_blocks) gives -1
    ("rows", "i32"), ("top_k", "i32"), ("width", "i32"),
    ("next_n", "i32"), ("max_blocks", "i32"), ("block_size", "i32"),
    ("chunk_blocks", "i32"),  # columns of chunk_table
    ("lens_per_row", "i32"), ("sorted", "i32"), ("last", "i32"),
]))
# The last launch of the fused decode top-k (hsaco_src/generic/paged_topk_merge.hip): each row's pieces merged into
# its outputs, and each sequence's list emptied for the next call. Optional arrays are 0: values, slots.
STRUCTS.append(Struct("PagedTopkMergeParams", _DECODE_TOPK_POINTERS + [
    ("seq_done", "ptr:i32"),  # per sequence, its rows merged so far: the last one empties the sequence's list
    ("indices", "ptr:i32"), ("values", "ptr:f32"), ("slots", "ptr:i32"), ("block_tables", "ptr:i32"),
    ("indices_stride", "i64"), ("values_stride", "i64"), ("slots_stride", "i64"),  # elements between rows
    ("num_blocks", "i64"),  # the cache's blocks: a slot's block id outside [0, num_blocks) gives -1
    ("B", "i32"), ("next_n", "i32"), ("top_k", "i32"), ("units", "i32"), ("max_blocks", "i32"),
    ("block_size", "i32"), ("max_model_len", "i32"), ("sorted", "i32"),
    # A first level (group > 0): groups blocks a row, each merging `group` list entries into the first one's slot;
    # the last level (group 0) reads every stride-th entry of a sequence's list.
    ("group", "i32"), ("groups", "i32"), ("stride", "i32"),
]))
STRUCTS.append(Struct("TopkStepParams", [
    ("w", "ptr:f32"), ("cols", "ptr:i32"), ("ws", "ptr:i32"), ("indices", "ptr:i32"), ("values", "ptr:f32"),
    ("rel", "ptr:i32"), ("ks", "ptr:i32"), ("ke", "ptr:i32"), ("chunk_ks", "ptr:i32"), ("chunk_ke", "ptr:i32"),
    ("w_stride", "i64"), ("cols_stride", "i64"), ("ws_stride", "i64"), ("indices_stride", "i64"),
    ("values_stride", "i64"),  # elements between rows
    ("base", "i64"), ("next_key", "i64"),  # the first key of this chunk and of the next
    ("rows", "i32"), ("top_k", "i32"), ("width", "i32"), ("next_width", "i32"),
    ("sorted", "i32"), ("last", "i32"),
]))
# The split path of topk_logits (hipindexer.ops.topk, hsaco_src/common/topk_split.h): TopkParams' fields, then the
# workspace (per row at row * row_bytes: the floor and the count of kept keys, up to cap kept entries at cand_off,
# which ops.topk lays out), the cut of each row into `parts` column ranges of part_len columns, the floor's sample
# (a step-th of the row) and rank r, and the row-wise kernel's `held`: rows of at most that many of its tiles are
# held in the block and selected there (0: none).
STRUCTS.append(Struct("TopkSplitParams", [
    ("logits", "ptr:f32"), ("lengths", "ptr:i32"), ("indices", "ptr:i32"), ("values", "ptr:f32"), ("work", "ptr:u8"),
    ("logits_stride", "i64"), ("indices_stride", "i64"), ("values_stride", "i64"),
    ("row_bytes", "i64"), ("cand_off", "i64"),
    ("rows", "i32"), ("N", "i32"), ("top_k", "i32"), ("sorted", "i32"),
    ("parts", "i32"), ("part_len", "i32"), ("cap", "i32"), ("step", "i32"), ("r", "i32"), ("held", "i32"),
]))
# Read-only streaming: the benchmark's read ceiling (one sum per block written, so nothing is optimised away).
STRUCTS.append(Struct("StreamReadParams", [("src", "ptr"), ("out", "ptr:u32"), ("n16", "u64")]))
# The fp8 wgmma peak loop (sm_90a): the benchmark's matrix-rate ceiling.
STRUCTS.append(Struct("PeakParams", [("out", "ptr:f32"), ("iters", "i32")]))
STRUCT = {s.name: s for s in STRUCTS}

_H32_H64 = ((32, 128), (64, 128))  # the fast paths' (H, D): GLM-5's indexer heads and DeepSeek-V3.2's
KERNELS = [
    Kernel("fill_u32", "generic/fill.hip", "hx_fill_u32", "FillParams", block=256),
    Kernel("echo_params", "generic/echo.hip", "hx_echo_params", "EchoParams", block=64, test_only=True),
    Kernel("copy_u32x4", "generic/copy.hip", "hx_copy_u32x4", "CopyParams", block=256),
    Kernel("split_probe", "generic/split_probe.hip", "hx_split_probe", "SplitProbeParams", block=64, test_only=True),
    Kernel("rows_cut_probe", "generic/rows_cut_probe.hip", "hx_rows_cut_probe", "RowsCutProbeParams", block=384,
           smem=65536, test_only=True),
    Kernel("mqa_logits_generic", "generic/mqa_logits.hip", "hx_mqa_logits_generic", "PrefillParams", block=256,
           accumulation="fp32"),
]
# Generic paged decode: any H, D % 16 == 0 up to 1024 (its staged key rows), any block_size, both layouts
# (hipindexer.plan.decode.GENERIC_DECODE).
# The generic kernel as the fused prefill top-k's filter (-DHX_TOPK_FILTER): every shape, every target.
KERNELS.append(Kernel("mqa_topk_generic", "generic/mqa_logits.hip", "hx_mqa_topk_generic", "PrefillTopkParams",
                      block=256, defines=(("HX_TOPK_FILTER", 1),), accumulation="fp32"))
KERNELS.append(Kernel("paged_mqa_logits_generic", "generic/paged_mqa_logits.hip", "hx_paged_mqa_logits_generic",
                      "DecodeParams", block=128, accumulation="fp32", max_dim=1024))
KERNELS.append(Kernel("stream_read_u32x4", "generic/stream_read.hip", "hx_stream_read_u32x4", "StreamReadParams",
                      block=256))
# The paged K cache on the device (hipindexer.ops.cache): quantise-and-write by slot, gather for prefill, and the
# packed prefill windows of a chunk.
KERNELS.append(Kernel("quantize_and_cache", "generic/cache_write.hip", "hx_quantize_and_cache", "CacheWriteParams",
                      block=256))
KERNELS.append(Kernel("gather_cached_keys", "generic/cache_gather.hip", "hx_gather_cached_keys", "CacheGatherParams",
                      block=256))
KERNELS.append(Kernel("packed_prefill_windows", "generic/prefill_windows.hip", "hx_packed_prefill_windows",
                      "WindowsParams", block=256))
# The standalone top-k over a logits array: one block per row, radix select, compaction in index order, bitonic sort
# for sorted=True (hsaco_src/generic/topk_logits.hip).
KERNELS.append(Kernel("topk_logits", "generic/topk_logits.hip", "hx_topk_logits", "TopkParams", block=256))
# The resident path of topk_logits: a row's keys held in shared memory from one read to the selection's end. Its
# launch takes what the row needs (hipindexer.plan.topk.resident_smem); the build's limit is the most a block has
# beside the kernel's own 8 KiB: 160 KiB of LDS on gfx950, 227 KiB on sm_90a.
KERNELS.append(Kernel("topk_resident", "generic/topk_resident.hip", "hx_topk_resident", "TopkParams", block=1024,
                      smem=155520, smem_on=(("sm_90a", 223232),)))
# The same at 512 threads, whose registers leave room for a second block a unit: for more rows than units
# (hipindexer.plan.topk.resident_narrow).
KERNELS.append(Kernel("topk_resident_narrow", "generic/topk_resident.hip", "hx_topk_resident", "TopkParams",
                      block=512, smem=155520, smem_on=(("sm_90a", 223232),)))
# The cluster path of topk_logits (sm_90a): a row's keys cut among a cluster of 8 blocks, held in their shared memory
# (hsaco_src/sm90a/topk_cluster.hip); its launch takes what a block's part needs (hipindexer.plan.topk.cluster_smem).
KERNELS.append(Kernel("topk_cluster", "sm90a/topk_cluster.hip", "hx_topk_cluster", "TopkParams", block=512,
                      targets=("sm_90a",), smem=219136, defines=(("HX_CLUSTER", 8),)))
# The composed top-k ops' step kernels (hsaco_src/generic/paged_topk_step.hip, topk_chunk_step.hip).
# Two block sizes of the step: 256 threads while a group has rows enough to fill the device several blocks an SM
# deep, 512 (shorter passes per row) for fewer rows (STEP_WIDE_ROWS in hipindexer.ops.prefill_topk and
# paged_topk).
KERNELS.append(Kernel("topk_slots", "generic/topk_slots.hip", "hx_topk_slots", "TopkSlotsParams", block=256))
KERNELS.append(Kernel("paged_topk_step", "generic/paged_topk_step.hip", "hx_paged_topk_step", "PagedTopkStepParams",
                      block=256))
KERNELS.append(Kernel("paged_topk_step_wide", "generic/paged_topk_step.hip", "hx_paged_topk_step",
                      "PagedTopkStepParams", block=512))
KERNELS.append(Kernel("paged_topk_merge", "generic/paged_topk_merge.hip", "hx_paged_topk_merge",
                      "PagedTopkMergeParams", block=512, smem=131072,  # 16,384 entries of a row's list at once
                      smem_on=(("sm_90a", 196608),),  # 24,576: one round for the rows of B = 16 at 131,072
                      block_on=(("sm_90a", 1024),)))  # one block an SM (its buffer): twice the threads for a row
KERNELS.append(Kernel("topk_chunk_step", "generic/topk_chunk_step.hip", "hx_topk_chunk_step", "TopkStepParams",
                      block=256))
KERNELS.append(Kernel("topk_chunk_step_wide", "generic/topk_chunk_step.hip", "hx_topk_chunk_step", "TopkStepParams",
                      block=512))
KERNELS.append(Kernel("prefill_topk_sample", "generic/prefill_topk_sample.hip", "hx_prefill_topk_sample",
                      "PrefillSampleParams", block=256))
# The floors: a block of 128 threads a row, so that many rows share an SM (a row is three short passes over its
# samples and a few meetings).
KERNELS.append(Kernel("prefill_topk_floor", "generic/prefill_topk_floor.hip", "hx_prefill_topk_floor",
                      "PrefillSampleParams", block=128))
KERNELS.append(Kernel("prefill_topk_finish", "generic/prefill_topk_finish.hip", "hx_prefill_topk_finish",
                      "PrefillTopkFinishParams", block=256, smem=36864))  # 4608 entries: four blocks an SM on sm_90a
# The floors with more threads a row, for a group of rows too few to fill the GPU with the blocks above (each pass
# over a row's samples shorter): groups of up to prefill_topk_fused.WIDE_ROWS rows.
KERNELS.append(Kernel("prefill_topk_floor_wide", "generic/prefill_topk_floor.hip", "hx_prefill_topk_floor",
                      "PrefillSampleParams", block=512))
# Its split path for long rows: each row's floor from a sample of it (512 threads a row: the rows are few and each
# pass over a sample waits on its loads), the keys at or above it kept by rows x parts blocks, then one block per row
# (512 threads: its scans and sort are barrier-bound) that selects among them and writes in order, or runs
# topk_logits' row algorithm.
KERNELS.append(Kernel("topk_split_floor", "generic/topk_split_floor.hip", "hx_topk_split_floor", "TopkSplitParams",
                      block=512))
KERNELS.append(Kernel("topk_split_gather", "generic/topk_split_gather.hip", "hx_topk_split_gather", "TopkSplitParams",
                      block=256))
KERNELS.append(Kernel("topk_split_finish", "generic/topk_split_finish.hip", "hx_topk_split_finish", "TopkSplitParams",
                      block=512, smem=65536))  # 8192 entries: a selection of MAX_TOP_K and as many again
# The same three steps by one block a row in one launch, the kept keys in shared memory (16,384 entries): the path
# for rows few enough that the split path's launches are most of its time.
KERNELS.append(Kernel("topk_rowwise", "generic/topk_rowwise.hip", "hx_topk_rowwise", "TopkSplitParams", block=512,
                      smem=131072))
KERNELS.append(Kernel("logits_tile", "gfx950/logits_tile.hip", "hx_logits_tile", "LogitsTileParams", block=64,
                      targets=("gfx950",), accumulation="fp32", test_only=True))
# gfx950 fast prefill path (H in {32, 64}, D = 128): scaled MFMAs, K through LDS, 8 rows per block.
KERNELS.append(Kernel("mqa_logits_mfma", "gfx950/mqa_logits_mfma.hip", "hx_mqa_logits_mfma", "PrefillParams",
                      block=256, targets=("gfx950",), variants=({"HX_HEADS": 32}, {"HX_HEADS": 64}),
                      accumulation="fp32", fits=_H32_H64))
# The same kernel filtering each row's keys by its floor (-DHX_TOPK_FILTER): the fused prefill top-k's gfx950 filter.
KERNELS.append(Kernel("mqa_topk_mfma", "gfx950/mqa_logits_mfma.hip", "hx_mqa_topk_mfma", "PrefillTopkParams",
                      block=256, targets=("gfx950",), variants=({"HX_HEADS": 32}, {"HX_HEADS": 64}),
                      defines=(("HX_TOPK_FILTER", 1),), accumulation="fp32", fits=_H32_H64))
# gfx950 fast decode path (H in {32, 64}, D = 128): scaled 16x16x128 MFMAs, 4 waves per unit taking 64-key
# pages, the live rows' Q in LDS. One source, two builds: block sizes that are powers of two >= 16 (both
# layouts), and block_size 1 (each key gathered through its own 64-bit address).
KERNELS.append(Kernel("paged_mqa_logits_mfma", "gfx950/paged_mqa_logits_mfma.hip", "hx_paged_mqa_logits_mfma",
                      "DecodeParams", block=256, targets=("gfx950",), variants=({"HX_HEADS": 32}, {"HX_HEADS": 64}),
                      accumulation="fp32", fits=_H32_H64, block_sizes=(16, 32, 64, 128, 256, 512, 1024)))
KERNELS.append(Kernel("paged_mqa_logits_mfma_bs1", "gfx950/paged_mqa_logits_mfma.hip",
                      "hx_paged_mqa_logits_mfma_bs1", "DecodeParams", block=256, targets=("gfx950",),
                      variants=({"HX_HEADS": 32}, {"HX_HEADS": 64}), defines=(("HX_GATHER", 1),),
                      accumulation="fp32", fits=_H32_H64, block_sizes=(1,), layouts=(False,)))
# The decode top-k fused into that kernel's unit (hsaco_src/gfx950/paged_mqa_topk_mfma.hip): next_n <= 2, top_k <=
# 2048, the candidates in LDS (two units a CU); hipindexer.ops.paged_topk_fused runs it, then paged_topk_merge.
KERNELS.append(Kernel("paged_mqa_topk_mfma", "gfx950/paged_mqa_topk_mfma.hip", "hx_paged_mqa_topk_mfma",
                      "DecodeTopkParams", block=256, targets=("gfx950",), variants=({"HX_HEADS": 32}, {"HX_HEADS": 64}),
                      accumulation="fp32", fits=_H32_H64, block_sizes=(16, 32, 64, 128, 256, 512, 1024)))
# sm_90a fast prefill path (H in {32, 64}, D = 128) and the fp8 matrix-rate ceiling of the benchmark: four math
# warpgroups, m64n128 each (hsaco_src/sm90a/mqa_logits_wgmma.hip on prefill_cta.h and hopper.h).
KERNELS.append(Kernel("mqa_logits_wgmma", "sm90a/mqa_logits_wgmma.hip", "hx_mqa_logits_wgmma", "PrefillParams",
                      block=640, targets=("sm_90a",), variants=({"HX_HEADS": 32}, {"HX_HEADS": 64}),
                      smem=204800, accumulation="fp8_tc", fits=_H32_H64))
# At H = 64 with the linear half of the ReLU folded into the MMA (m64n136) and two math warpgroups that keep every
# weight in registers: faster, and its error grows with |sum_h w_h x_h| instead of the kept heads' terms (see
# hipindexer.plan.prefill.WGMMA_FOLD_SM90). Its own source on the same pieces; HX_HEADS stays its variant axis
# (64 only).
KERNELS.append(Kernel("mqa_logits_wgmma_fold", "sm90a/mqa_logits_wgmma_fold.hip", "hx_mqa_logits_wgmma_fold",
                      "PrefillParams", block=384, targets=("sm_90a",), variants=({"HX_HEADS": 64},), smem=217088,
                      accumulation="fp8_tc", fits=((64, 128),)))
# The same kernels filtering each row's keys by its floor instead of writing logits (-DHX_TOPK_FILTER): the fused
# prefill top-k (hipindexer.ops.prefill_topk_fused) at H = 64 (fold) and H = 32 (plain), after prefill_topk_sample
# and prefill_topk_floor, before prefill_topk_finish.
KERNELS.append(Kernel("mqa_topk_wgmma", "sm90a/mqa_logits_wgmma.hip", "hx_mqa_topk_wgmma", "PrefillTopkParams",
                      block=640, targets=("sm_90a",), variants=({"HX_HEADS": 32},), smem=204800,
                      defines=(("HX_TOPK_FILTER", 1),), accumulation="fp8_tc", fits=((32, 128),)))
KERNELS.append(Kernel("mqa_topk_wgmma_fold", "sm90a/mqa_logits_wgmma_fold.hip", "hx_mqa_topk_wgmma_fold",
                      "PrefillTopkParams", block=384, targets=("sm_90a",), variants=({"HX_HEADS": 64},), smem=226304,
                      defines=(("HX_TOPK_FILTER", 1),), accumulation="fp8_tc", fits=((64, 128),)))
# sm_90a tensor-core decode (H in {32, 64}, D = 128, block_size 16 or 64, both layouts): keys by the tensor copy
# engine, landing in the wgmma operand layouts, three math warpgroups, every live row of a sequence from one read
# of its keys (hsaco_src/sm90a/paged_mqa_logits_wgmma_tma.hip; hipindexer.plan.decode.WGMMA_TMA_DECODE_SM90). The
# planner's default at those shapes. The stage ring takes the shared memory its Q slots leave, so it asks for all
# 227 KiB.
KERNELS.append(Kernel("paged_mqa_logits_wgmma_tma", "sm90a/paged_mqa_logits_wgmma_tma.hip",
                      "hx_paged_mqa_logits_wgmma_tma", "DecodeTmaParams", block=512, targets=("sm_90a",),
                      variants=({"HX_HEADS": 32}, {"HX_HEADS": 64}), smem=232448, accumulation="fp8_tc",
                      fits=_H32_H64, block_sizes=(16, 64)))
# The decode top-k fused into that kernel (hsaco_src/sm90a/paged_mqa_topk_wgmma_tma.hip): next_n <= 2, top_k <= 2048,
# the candidates on chip; hipindexer.ops.paged_topk_fused runs it, then paged_topk_merge.
KERNELS.append(Kernel("paged_mqa_topk_wgmma_tma", "sm90a/paged_mqa_topk_wgmma_tma.hip",
                      "hx_paged_mqa_topk_wgmma_tma", "DecodeTopkParams", block=512, targets=("sm_90a",),
                      variants=({"HX_HEADS": 32}, {"HX_HEADS": 64}), smem=232448, accumulation="fp8_tc",
                      fits=_H32_H64, block_sizes=(16, 64)))
KERNELS.append(Kernel("wgmma_peak", "sm90a/wgmma_peak.hip", "hx_wgmma_peak", "PeakParams", block=384,
                      targets=("sm_90a",), accumulation="fp8_tc"))
KERNEL = {k.key: k for k in KERNELS}


def header_text() -> str:
    body = "\n".join(s.header() for s in STRUCTS)
    return (
        "// Generated by build.py from hipindexer/catalog.py. Do not edit.\n"
        "#pragma once\n\n" + body
    )
