#!/usr/bin/env python3
"""ISA report for gfx950 kernels: resources and the hot loop's instruction mix and cycle estimate.

    python -m tools.support.isa_report                    # every gfx950 kernel of the manifest (recompiled with -S)
    python -m tools.support.isa_report FILE.s [...]       # any gfx950 assembly (clang -S output), e.g. another kernel's
    python -m tools.support.isa_report --json ...         # machine-readable
    hipindexer info --isa                         # the same, from the CLI

Per kernel function: VGPRs, AGPRs, SGPRs, scratch, LDS, occupancy (from the
assembly's own comments: clang's `; NumVgprs:` etc.), then the hot loop: the
back edge whose natural loop holds the most MFMAs (ties: the smallest,
i.e. the innermost). Its instructions are classified and costed with the
model below; its blocks (the natural loop of that back edge: every basic block that reaches the
branch without passing the header, wherever the compiler placed it) are
each counted once, as if every tile of the iteration ran its full path.

Cycle model (per wave, on one SIMD; the figures a reader should check):
  MFMA   passes x 4 cycles: v_mfma*_32x32x64_f8f6f4 (fp8 operands) 16 passes
         = 64 cycles, *_16x16x128_f8f6f4 8 passes = 32 cycles (the CDNA4 ISA reference; fp4
         x fp4 would be half, not modelled: the f8f6f4 format is read from
         cbsz/blgp when present, fp8 otherwise). Other shapes: 32x32 16 passes,
         16x16 8, 4x4 2 (assumed, flagged).
  VALU   4 cycles per wave64 instruction (a 16-lane SIMD, 4 passes),
         including v_pk_fma_f32 / v_pk_mul_f32 / v_pk_add_f32 (packed f32 runs
         at full rate on CDNA3/4: 256 FLOP/clk/CU); 64-bit integer / f64 ops
         (v_*_f64, v_*_u64, v_lshl_add_u64, v_mad_u64_u32) 8 cycles;
         transcendentals (v_rcp/v_rsq/v_sqrt/v_exp/v_log/v_sin/v_cos) 16.
  s_nop  N + 1 wait states (cycles) each, reported separately: the MFMA
         result hazard the compiler could not fill with independent work.
  VMEM, LDS, SMEM, waits, SALU, branches: counted, not costed (they issue
         from other pipes; their latency is what occupancy hides).
MFMA and VALU of one wave issue to different units and overlap across the
waves of a SIMD, so the goal is VALU cycles <= MFMA cycles per tile.

A "tile" is what one loop iteration's MFMAs divided by the kernel's MFMAs per
tile (--tile-mfmas, or the catalog kernel's figure below) cover; for a
prefill kernel whose tile is 32 keys x 4 rows at 32 heads, that is 8 MFMAs.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tools.support import roofline

ROOT = Path(__file__).resolve().parents[2]

# catalog kernel -> (MFMAs per tile, what a tile is); variants by define
TILE_MFMAS = {
    "mqa_logits_mfma.HX_HEADS-32": (4, "32 keys x 2 rows (one wave's row pair)"),
    "mqa_logits_mfma.HX_HEADS-64": (8, "32 keys x 2 rows (one wave's row pair)"),
    # the fused prefill top-k's filter build of the same kernel (HX_TOPK_FILTER): the same tile
    "mqa_topk_mfma.HX_HEADS-32": (4, "32 keys x 2 rows (one wave's row pair)"),
    "mqa_topk_mfma.HX_HEADS-64": (8, "32 keys x 2 rows (one wave's row pair)"),
}
# Paged decode kernels (hsaco_src/gfx950/decode_unit.h: the logits and the fused top-k): a tile is one row x one
# 64-key page (H / 16 MFMAs of 16x16x128); a page's rows are unrolled to DECODE_ROWS[kernel] (the rows the kernel
# stages), each skipped past the live ones. The fused kernel's offer of a row's keys to its buffer follows the row's
# MFMA block, so it counts as the page's own work.
DECODE_ROWS = {"paged_mqa_logits_mfma": 8, "paged_mqa_logits_mfma_bs1": 8, "paged_mqa_topk_mfma": 2}
for _key in DECODE_ROWS:
    for _h in (32, 64):
        TILE_MFMAS[f"{_key}.HX_HEADS-{_h}"] = (_h // 16 * 4, "1 row x 64-key page")
DECODE_KERNELS = {k for k in TILE_MFMAS if k.split(".")[0] in DECODE_ROWS}
PREFILL_KERNELS = {k for k in TILE_MFMAS if k.startswith("mqa_logits_mfma")}
# gfx950 (docs/gfx950.md): what bounds the waves resident per SIMD besides VGPRs.
LDS_PER_CU = 160 * 1024
SIMDS_PER_CU = 4

_FUNC = re.compile(r"-- Begin function (\S+)\n(.*?)(?=-- Begin function|\Z)", re.S)
_META = {"vgpr": r"NumVgprs", "agpr": r"NumAgprs", "sgpr": r"TotalNumSgprs", "scratch": r"ScratchSize",
         "occupancy": r"Occupancy", "lds": r"LDSByteSize"}
_LABEL = re.compile(r"^(\.?L\w+|[A-Za-z_]\w*):")
_BRANCH = re.compile(r"^s_(?:c?branch\w*)\s+(\S+)")
_TRANSC = re.compile(r"^v_(rcp|rsq|sqrt|exp|log|sin|cos)_")
_WIDE = re.compile(r"^v_\w*(_f64|_u64|_i64)\b|^v_lshl_add_u64|^v_mad_(u|i)64_(u|i)32")
CLASSES = ("mfma", "valu", "vmem", "vmem_lds", "lds", "smem", "salu", "branch", "barrier", "waitcnt", "nop")


@dataclass
class Loop:
    header: str
    first_line: int
    last_line: int
    counts: dict
    mfma_cycles: int
    valu_cycles: int
    nop_wait_states: int
    global_load_widths: dict
    assumed: list = field(default_factory=list)


@dataclass
class DecodeFigures:
    """The page loop of a paged decode kernel, split into the rows' math (the blocks holding MFMAs) and the
    page's own work (everything else in the loop), per row x page and per page."""
    rows: int                      # rows unrolled per page
    pages_per_iteration: float
    row_mfma_cycles: float         # one row x one page
    row_valu_cycles: float
    row_nop_wait_states: float
    page_valu_cycles: float        # one page, outside the rows' math
    page_salu: float               # SALU + branch instructions per page
    load_bytes_per_page: float     # bytes the page's vector loads issue (64 lanes x width, out-of-range lanes too)
    key_bytes_per_page: float      # of which 16-byte loads (the keys)
    inflight_bytes_per_wave: int   # most vector-load bytes outstanding at once, the loop run twice in layout order
    waves_per_simd_vgpr: int       # occupancy by registers (clang's figure)
    waves_per_simd_resident: float  # ... and by LDS, in whole workgroups
    waves_per_simd_planned: float  # what the planner's default grid puts on a SIMD (decode_plan)
    inflight_bytes_per_cu: float   # at the planned occupancy
    rare_valu_cycles: float = 0    # the loop's rarely taken branches (HX_ASM_MARK), each block once, left out above

    def page_valu_with(self, rows: int) -> float:
        """VALU cycles of a page with `rows` live rows: its own work and each row's."""
        return self.page_valu_cycles + rows * self.row_valu_cycles

    def valu_over_mfma(self, rows: int) -> float:
        """VALU cycles over MFMA cycles per page when `rows` rows of it are live."""
        return (self.page_valu_cycles + rows * self.row_valu_cycles) / (rows * self.row_mfma_cycles)


@dataclass
class PrefillFigures:
    """The key loop of the prefill MFMA kernel, per tile (one wave's row pair x 32 keys) and per wave, with
    the loop's instruction stream reduced to what its timeline needs (tools/support/roofline.py costs it)."""
    tiles_per_iteration: float
    mfma_cycles: float             # per tile, one wave: passes x 4
    valu_cycles: float
    nop_wait_states: float
    issue_cycles: float            # every other instruction's issue slot (SALU, branch, LDS, VMEM, waits): 4 each
    lds_read_bytes: float          # ds_read bytes (64 lanes x width)
    dma_bytes: float               # global->LDS bytes the wave's DMA instructions move (64 lanes x width)
    store_bytes: float             # vector store instruction bytes (64 lanes x width; exec masks not applied)
    waves_per_simd_vgpr: int       # occupancy by registers (clang's figure)
    waves_per_simd_resident: float  # ... and by LDS, in whole workgroups
    blocks_per_cu: int
    waves_per_block: int
    fill_cycles_per_element: float  # the clean_logits -inf fill loop: one wave's cycles per element of a row
    events: list = field(default_factory=list)  # the loop in layout order, see loop_events

    def valu_over_mfma(self) -> float:
        return self.valu_cycles / self.mfma_cycles


@dataclass
class KernelReport:
    name: str
    source: str                 # the .s file, or the manifest variant key
    resources: dict
    loop: Loop | None
    tile_mfmas: int | None = None
    tile_what: str = ""
    decode: DecodeFigures | None = None
    prefill: PrefillFigures | None = None
    body: str = field(default="", repr=False)   # the function's assembly

    def per_tile(self) -> dict | None:
        if self.loop is None or not self.loop.counts["mfma"]:
            return None
        tiles = self.loop.counts["mfma"] / (self.tile_mfmas or self.loop.counts["mfma"])
        return {"tiles_per_iteration": tiles, "mfma_cycles": self.loop.mfma_cycles / tiles,
                "valu_cycles": self.loop.valu_cycles / tiles, "valu_instructions": self.loop.counts["valu"] / tiles,
                "nop_wait_states": self.loop.nop_wait_states / tiles,
                "valu_over_mfma": self.loop.valu_cycles / self.loop.mfma_cycles}


def _instructions(body: str):
    """(line number, label or None, instruction text or None) per line, comments dropped."""
    for i, raw in enumerate(body.splitlines()):
        s = raw.split(";", 1)[0].strip()
        if not s:
            continue
        m = _LABEL.match(s)
        if m:
            yield i, m.group(1), None
        elif not s.startswith("."):
            yield i, None, s


def mfma_passes(ins: str) -> tuple[int, bool]:
    """(passes, assumed) of an MFMA instruction."""
    op = ins.split()[0]
    fp4 = "cbsz:4" in ins and "blgp:4" in ins
    if "32x32x64_f8f6f4" in op:
        return (8 if fp4 else 16), False
    if "16x16x128_f8f6f4" in op:
        return (4 if fp4 else 8), False
    if "_32x32x" in op:
        return 16, True
    if "_16x16x" in op:
        return 8, True
    return 2, True


def classify(ins: str) -> str:
    op = ins.split()[0]
    if op.startswith(("v_mfma", "v_smfmac")):
        return "mfma"
    if op.startswith(("buffer_", "global_", "flat_", "scratch_")):
        return "vmem_lds" if re.search(r"\blds\b", ins) else "vmem"
    if op.startswith("ds_"):
        return "lds"
    if op.startswith(("s_load", "s_buffer_load", "s_store", "s_buffer_store", "s_scratch", "s_atc", "s_dcache")):
        return "smem"
    if op.startswith("s_waitcnt"):
        return "waitcnt"
    if op == "s_nop":
        return "nop"
    if op.startswith(("s_branch", "s_cbranch", "s_setpc", "s_endpgm")):
        return "branch"
    if op == "s_barrier":
        return "barrier"
    if op.startswith("s_"):
        return "salu"
    if op.startswith("v_"):
        return "valu"
    return "salu"


def valu_cycles(ins: str) -> int:
    op = ins.split()[0]
    if _TRANSC.match(op):
        return 16
    if _WIDE.match(op):
        return 8
    return 4


def analyse_loop(lines, members: set, header: str, first: int, last: int) -> Loop:
    """Instruction mix and cycles of the loop whose instructions are the line numbers in `members`."""
    counts = {c: 0 for c in CLASSES}
    mfma_cyc = valu_cyc = nops = 0
    widths: dict = {}
    assumed = set()
    for ln, label, ins in lines:
        if ins is None or ln not in members:
            continue
        c = classify(ins)
        counts[c] += 1
        if c == "mfma":
            passes, guess = mfma_passes(ins)
            mfma_cyc += 4 * passes
            if guess:
                assumed.add(ins.split()[0])
        elif c == "valu":
            valu_cyc += valu_cycles(ins)
        elif c == "nop":
            nops += int(ins.split()[1]) + 1 if len(ins.split()) > 1 else 1
        elif c in ("vmem", "vmem_lds"):
            m = re.match(r"(?:buffer|global|flat)_load_(dwordx\d|dword|b\d+|ubyte|ushort|sbyte|sshort|short_d16\w*)", ins)
            if m:
                key = m.group(1) + ("+lds" if c == "vmem_lds" else "")
                widths[key] = widths.get(key, 0) + 1
    return Loop(header, first, last, counts, mfma_cyc, valu_cyc, nops, widths, sorted(assumed))


def basic_blocks(lines):
    """[(label or None, [(line, instruction)], successor labels/indices)] in layout order."""
    blocks, cur = [], {"label": None, "ins": []}
    for ln, label, ins in lines:
        if label is not None:
            if cur["ins"] or cur["label"]:
                blocks.append(cur)
            cur = {"label": label, "ins": []}
            continue
        cur["ins"].append((ln, ins))
        op = ins.split()[0]
        if op.startswith(("s_branch", "s_cbranch", "s_endpgm", "s_setpc")):
            blocks.append(cur)
            cur = {"label": None, "ins": []}
    if cur["ins"] or cur["label"]:
        blocks.append(cur)
    index = {b["label"]: i for i, b in enumerate(blocks) if b["label"]}
    for i, b in enumerate(blocks):
        succ = set()
        last = b["ins"][-1][1] if b["ins"] else ""
        op = last.split()[0] if last else ""
        m = _BRANCH.match(last) if last else None
        if m and m.group(1) in index:
            succ.add(index[m.group(1)])
        if not op.startswith(("s_branch", "s_endpgm", "s_setpc")) and i + 1 < len(blocks):
            succ.add(i + 1)  # fall through (conditional branches too)
        b["succ"] = succ
    return blocks


def dominators(blocks, preds) -> list[set]:
    n = len(blocks)
    every = set(range(n))
    dom = [{0}] + [set(every) for _ in range(n - 1)]
    changed = True
    while changed:
        changed = False
        for i in range(1, n):
            ps = [dom[p] for p in preds[i]]
            new = (set.intersection(*ps) if ps else set()) | {i}
            if new != dom[i]:
                dom[i], changed = new, True
    return dom


def marked_blocks(body: str, blocks, dom, mark: str) -> set:
    """The blocks dominated (dom: dominators' result) by one holding wave.h's HX_ASM_MARK(mark): the branch it
    starts, up to where the branch rejoins the common path."""
    lines = [i for i, raw in enumerate(body.splitlines()) if f";hx-{mark}" in raw]
    heads = {next(i for i, b in enumerate(blocks) if b["ins"] and b["ins"][-1][0] > ln) for ln in lines}
    return {i for i in range(len(blocks)) if dom[i] & heads} if heads else set()


def block_dominators(blocks) -> list[set]:
    """Each block's dominators, from its predecessors as basic_blocks' successors give them."""
    preds = {i: set() for i in range(len(blocks))}
    for i, b in enumerate(blocks):
        for s_ in b["succ"]:
            preds[s_].add(i)
    return dominators(blocks, preds)


def natural_loops(body: str) -> list[tuple[Loop, set]]:
    """Every natural loop (a back edge to an earlier header, plus every block that reaches the back edge
    without passing the header) with the line numbers of its instructions."""
    lines = list(_instructions(body))
    blocks = basic_blocks(lines)
    preds = {i: set() for i in range(len(blocks))}
    for i, b in enumerate(blocks):
        for s_ in b["succ"]:
            preds[s_].add(i)
    dom = dominators(blocks, preds)
    out = []
    for tail, b in enumerate(blocks):
        for h in b["succ"]:
            if h not in dom[tail]:
                continue  # a back edge goes to a block that dominates its source
            members, todo = {h}, [tail]
            while todo:
                x = todo.pop()
                if x in members:
                    continue
                members.add(x)
                todo += list(preds[x])
            lns = {ln for i in members for ln, _ in blocks[i]["ins"]}
            if lns:
                out.append((analyse_loop(lines, lns, blocks[h]["label"] or f"block{h}", min(lns), max(lns)), lns))
    return out


def hot_loop(body: str) -> Loop | None:
    """The natural loop with the most MFMAs; ties go to the smallest (innermost)."""
    best = None
    for loop, lns in natural_loops(body):
        key = (loop.counts["mfma"], -len(lns))
        if best is None or key > best[0]:
            best = (key, loop)
    return best[1] if best else None


_LOAD_WIDTH = re.compile(r"^(?:buffer|global)_load_(dwordx4|dwordx3|dwordx2|dword|b128|b96|b64|b32)\b")
_WIDTH_BYTES = {"dword": 4, "dwordx2": 8, "dwordx3": 12, "dwordx4": 16, "b32": 4, "b64": 8, "b96": 12, "b128": 16}


def vm_inflight(instructions) -> int:
    """Most bytes of vector loads outstanding at once (64 lanes x width each) over `instructions` run twice
    in order (the second pass starts from the first's outstanding loads), under the vmcnt rule: every vector
    memory instruction, loads, stores and atomics alike, joins one in-order count that s_waitcnt vmcnt(N) drains
    to N."""
    from collections import deque
    q, peak = deque(), 0
    for _ in range(2):
        for ins in instructions:
            op = ins.split()[0]
            if op == "s_waitcnt":
                m = re.search(r"vmcnt\((\d+)\)", ins)
                if m:
                    while len(q) > int(m.group(1)):
                        q.popleft()
                continue
            m = _LOAD_WIDTH.match(ins)
            if m:
                q.append(64 * _WIDTH_BYTES[m.group(1)])
            elif op.startswith(("buffer_store", "global_store", "buffer_atomic", "global_atomic", "flat_")):
                q.append(0)
            peak = max(peak, sum(q))
    return peak


def decode_figures(body: str, loop: Loop, tile_mfmas: int, resources: dict, block: int = 256,
                   planned_waves_per_simd: float | None = None, rows: int = 8) -> DecodeFigures | None:
    """The page loop's figures for a paged decode kernel (see DecodeFigures); None without an MFMA loop."""
    lines = list(_instructions(body))
    blocks = basic_blocks(lines)
    dom = block_dominators(blocks)
    rare = marked_blocks(body, blocks, dom, "rare-path")
    row_blocks = marked_blocks(body, blocks, dom, "row") - rare  # without marks: the blocks holding MFMAs
    in_loop = [i for i, b in enumerate(blocks) if b["ins"] and loop.first_line <= b["ins"][0][0] <= loop.last_line]
    members = [i for i in in_loop if i not in rare]
    if not members or not loop.counts["mfma"]:
        return None
    rare_valu = sum(valu_cycles(ins) for i in in_loop if i in rare for _, ins in blocks[i]["ins"]
                    if classify(ins) == "valu")
    row = {"mfma": 0, "valu": 0, "nop": 0}
    page = {"valu": 0, "salu": 0, "load": 0, "key": 0}
    for i in members:
        b = blocks[i]
        is_row = i in row_blocks if row_blocks else any(classify(ins) == "mfma" for _, ins in b["ins"])
        for _, ins in b["ins"]:
            c = classify(ins)
            if is_row and c == "mfma":
                row["mfma"] += 4 * mfma_passes(ins)[0]
            elif is_row and c == "valu":
                row["valu"] += valu_cycles(ins)
            elif is_row and c == "nop":
                row["nop"] += int(ins.split()[1]) + 1 if len(ins.split()) > 1 else 1
            elif c == "valu":
                page["valu"] += valu_cycles(ins)
            elif c in ("salu", "branch"):
                page["salu"] += 1
            m = _LOAD_WIDTH.match(ins)
            if m:
                page["load"] += 64 * _WIDTH_BYTES[m.group(1)]
                page["key"] += 64 * 16 if _WIDTH_BYTES[m.group(1)] == 16 else 0
    row_pages = loop.counts["mfma"] / tile_mfmas
    pages = row_pages / rows
    waves = block // 64
    vgpr_occ = resources.get("occupancy", 0)
    lds = resources.get("lds", 0)
    units_by_lds = LDS_PER_CU // lds if lds else 10 ** 6
    resident = min(vgpr_occ * SIMDS_PER_CU // waves, units_by_lds) * waves / SIMDS_PER_CU
    planned = min(resident, planned_waves_per_simd) if planned_waves_per_simd else resident
    inflight = vm_inflight([ins for i in members for _, ins in blocks[i]["ins"]])
    return DecodeFigures(rows, pages, row["mfma"] / row_pages, row["valu"] / row_pages, row["nop"] / row_pages,
                         page["valu"] / pages, page["salu"] / pages, page["load"] / pages, page["key"] / pages,
                         inflight, vgpr_occ, resident, planned, inflight * planned * SIMDS_PER_CU, rare_valu)


_LDS_READ = re.compile(r"^ds_read_?(b128|b96|b64|b32|u16|u8|i16|i8|2addr_b32|2addr_b64|2st64_b32|2st64_b64)")
_LDS_READ_BYTES = {"b128": 16, "b96": 12, "b64": 8, "b32": 4, "u16": 2, "u8": 1, "i16": 2, "i8": 1,
                   "2addr_b32": 8, "2addr_b64": 16, "2st64_b32": 8, "2st64_b64": 16}
_STORE_WIDTH = re.compile(r"^(?:buffer|global)_store_(dwordx4|dwordx3|dwordx2|dword|b128|b96|b64|b32)\b")


def loop_events(instructions) -> list:
    """A loop's instructions in layout order as a timeline: ["busy", cycles] (MFMA passes x 4, VALU cycles,
    s_nop wait states, 4 cycles of issue for SALU and branches; runs merged), ["lds"], ["load"], ["store"]
    (an LDS, vector load or vector store instruction issued), ["wait", vmcnt, lgkmcnt] (-1: not waited on),
    ["barrier"]. The memory and wait events cost their 4-cycle issue slot in the timeline itself."""
    ev: list = []

    def busy(c):
        if ev and ev[-1][0] == "busy":
            ev[-1][1] += c
        else:
            ev.append(["busy", c])
    for ins in instructions:
        c = classify(ins)
        op = ins.split()[0]
        if c == "mfma":
            busy(4 * mfma_passes(ins)[0])
        elif c == "valu":
            busy(valu_cycles(ins))
        elif c == "nop":
            busy(int(ins.split()[1]) + 1 if len(ins.split()) > 1 else 1)
        elif c == "lds":
            ev.append(["lds"])
        elif c in ("vmem", "vmem_lds"):
            ev.append(["store"] if "_store" in op or "_atomic" in op else ["load"])
        elif c == "waitcnt":
            vm, lg = re.search(r"vmcnt\((\d+)\)", ins), re.search(r"lgkmcnt\((\d+)\)", ins)
            ev.append(["wait", int(vm.group(1)) if vm else -1, int(lg.group(1)) if lg else -1])
        elif c == "barrier":
            ev.append(["barrier"])
        else:  # SALU, SMEM issue, branches
            busy(4)
    return ev


def prefill_figures(body: str, loop: Loop, tile_mfmas: int, resources: dict, block: int = 256) -> PrefillFigures | None:
    """The key loop's figures for the prefill MFMA kernel (see PrefillFigures); None without an MFMA loop."""
    if not loop.counts["mfma"]:
        return None
    lines = list(_instructions(body))
    blocks = basic_blocks(lines)
    members = [b for b in blocks if b["ins"] and loop.first_line <= b["ins"][0][0] <= loop.last_line]
    ins = [i for b in members for _, i in b["ins"]]
    tiles = loop.counts["mfma"] / tile_mfmas
    lds = dma = store = 0
    for i in ins:
        m = _LDS_READ.match(i)
        if m:
            lds += 64 * _LDS_READ_BYTES[m.group(1)]
        m = _LOAD_WIDTH.match(i)
        if m and classify(i) == "vmem_lds":
            dma += 64 * _WIDTH_BYTES[m.group(1)]
        m = _STORE_WIDTH.match(i)
        if m:
            store += 64 * _WIDTH_BYTES[m.group(1)]
    c = loop.counts
    other = sum(c[k] for k in ("vmem", "vmem_lds", "lds", "smem", "salu", "branch", "barrier", "waitcnt"))
    waves = block // 64
    vgpr_occ = resources.get("occupancy", 0)
    lds_bytes = resources.get("lds", 0)
    units_by_lds = LDS_PER_CU // lds_bytes if lds_bytes else 10 ** 6
    blocks_per_cu = min(vgpr_occ * SIMDS_PER_CU // waves, units_by_lds)
    return PrefillFigures(tiles, loop.mfma_cycles / tiles, loop.valu_cycles / tiles, loop.nop_wait_states / tiles,
                          4 * other / tiles, lds / tiles, dma / tiles, store / tiles, vgpr_occ,
                          blocks_per_cu * waves / SIMDS_PER_CU, blocks_per_cu, waves, fill_cycles(body),
                          loop_events(ins))


def fill_cycles(body: str) -> float:
    """One wave's cycles per element of the -inf fill: the smallest MFMA-free loop holding a vector store (each
    store covers 64 elements of a row), its VALU cycles plus 4 cycles of issue per other instruction."""
    best = None
    for loop, lns in natural_loops(body):
        c = loop.counts
        if c["mfma"] or not c["vmem"]:
            continue
        other = sum(c[k] for k in CLASSES if k not in ("valu", "mfma", "nop"))
        cost = (loop.valu_cycles + loop.nop_wait_states + 4 * other) / (64 * c["vmem"])
        if best is None or len(lns) < best[0]:
            best = (len(lns), cost)
    return best[1] if best else 0.0


def report_asm(asm: str, source: str, tile_mfmas: int | None = None, tile_what: str = "") -> list[KernelReport]:
    out = []
    for name, body in _FUNC.findall(asm):
        res = {}
        for key, pat in _META.items():
            m = re.search(rf"^; {pat}: (\d+)", body, re.M)
            if m:
                res[key] = int(m.group(1))
        out.append(KernelReport(name, source, res, hot_loop(body), tile_mfmas, tile_what, body=body))
    return out


# clang -S output by (variant, object, sources, flags, source tree): one process's reports (the tests' several
# fixtures) compile each kernel once.
_ASM: dict = {}


def _manifest_asm(entry: dict, src_root: Path) -> str:
    """clang -S of a manifest entry with the flags it was built with (and the current params header)."""
    key = (entry["variant_key"], entry.get("sha256"), entry.get("source_hash"), tuple(entry["flags"]), str(src_root))
    if key not in _ASM:
        _ASM[key] = _compile_asm(entry, src_root)
    return _ASM[key]


def _compile_asm(entry: dict, src_root: Path) -> str:
    from hipindexer import catalog
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "include").mkdir()
        (work / "include" / "hx_params.h").write_text(catalog.header_text())
        flags = [f.replace("<src>", str(src_root)).replace("<work>", str(work)) for f in entry["flags"]]
        argv = [sys.executable, "-m", "ziglang", "clang", *flags, "-I", str(src_root / "gfx950"), "-S",
                str(src_root / entry["source"]), "-o", str(work / "k.s")]
        p = subprocess.run(argv, capture_output=True, text=True)
        if p.returncode:
            raise RuntimeError(f"clang -S {entry['variant_key']} failed:\n{p.stderr}")
        return (work / "k.s").read_text()


def manifest_reports(manifest: Path | None = None, src_root: Path | None = None,
                     names: tuple = ()) -> list[KernelReport]:
    """Every gfx950 kernel of the manifest (those of the catalog keys `names`, when given), recompiled with -S."""
    manifest = manifest or ROOT / "hipindexer" / "kernels" / "manifest.json"
    src_root = src_root or ROOT / "hsaco_src"
    doc = json.loads(Path(manifest).read_text())
    entries = [e for e in doc["kernels"] if e["target"] == "gfx950" and (not names or e["name"] in names)]
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:  # each compile is a clang process
        asms = list(pool.map(lambda e: _manifest_asm(e, src_root), entries))
    reports = []
    for e, asm in zip(entries, asms):
        tm, what = TILE_MFMAS.get(e["variant_key"], (None, ""))
        for r in report_asm(asm, e["variant_key"], tm, what):
            mres = e.get("resources", {})
            for k in ("vgpr", "agpr", "scratch", "occupancy", "lds"):  # the code object's note is the authority
                if k in mres and r.resources.get(k) != mres[k]:
                    r.resources[f"{k}_asm"] = r.resources.get(k)
                    r.resources[k] = mres[k]
            if e["variant_key"] in DECODE_KERNELS and r.loop is not None:
                r.decode = decode_figures(r.body, r.loop, tm, r.resources, e["block"],
                                          _planned_waves_per_simd(e["name"], e.get("variant", {}).get("HX_HEADS")),
                                          DECODE_ROWS[e["name"]])
            if e["variant_key"] in PREFILL_KERNELS and r.loop is not None:
                r.prefill = prefill_figures(r.body, r.loop, tm, r.resources, e["block"])
            reports.append(r)
    return reports


def _planned_waves_per_simd(key: str, heads) -> float | None:
    """Waves per SIMD the decode planner's default grid aims at for this kernel (hipindexer.plan.decode)."""
    try:
        from hipindexer.plan import decode as decode_plan
    except ImportError:
        return None
    spec = decode_plan.DECODE.by_key.get(key)
    if spec is None or not spec.page or heads is None:
        return None
    return min(decode_plan.WAVES_PER_SIMD, spec.resident_waves_per_simd(heads))


def as_dict(r: KernelReport) -> dict:
    d = {"kernel": r.name, "source": r.source, "resources": r.resources, "tile_mfmas": r.tile_mfmas,
         "tile": r.tile_what, "loop": asdict(r.loop) if r.loop else None, "per_tile": r.per_tile()}
    if r.decode is not None:
        d["decode"] = asdict(r.decode) | {f"valu_over_mfma_rows_{n}": r.decode.valu_over_mfma(n) for n in (1, 6, 8)}
    if r.prefill is not None:
        d["prefill"] = {k: v for k, v in asdict(r.prefill).items() if k != "events"} | {
            "valu_over_mfma": r.prefill.valu_over_mfma()}
    return d


def format_decode_table(reports: list[KernelReport]) -> str:
    """The paged decode kernels' page loops: per row x page, per page, and loads in flight."""
    head = ["kernel", "occ vgpr/res/plan", "mfma cyc/row", "valu cyc/row", "nop ws/row", "page valu cyc",
            "page salu", "valu cyc/page n=1/2", "valu/mfma n=1/6/8", "key B/page", "load B/page", "in flight B/wave", "KiB/CU (plan)"]
    rows = []
    for r in reports:
        f = r.decode
        if f is None:
            continue
        rows.append([r.source, f"{f.waves_per_simd_vgpr}/{f.waves_per_simd_resident:g}/{f.waves_per_simd_planned:g}",
                     f"{f.row_mfma_cycles:.0f}", f"{f.row_valu_cycles:.0f}", f"{f.row_nop_wait_states:.1f}",
                     f"{f.page_valu_cycles:.0f}", f"{f.page_salu:.0f}",
                     "/".join(f"{f.page_valu_with(n):.0f}" for n in (1, 2)),
                     "/".join(f"{f.valu_over_mfma(n):.2f}" for n in (1, 6, 8)), f"{f.key_bytes_per_page:.0f}",
                     f"{f.load_bytes_per_page:.0f}", f"{f.inflight_bytes_per_wave}",
                     f"{f.inflight_bytes_per_cu / 1024:.0f}"])
    if not rows:
        return ""
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    fmt = lambda row: "  ".join(str(x).ljust(w) for x, w in zip(row, widths))  # noqa: E731
    return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])


def format_prefill_section(reports: list[KernelReport]) -> str:
    """The prefill kernel's key loop (per tile) and its estimated times, or "" without it."""
    figs = {r.source: asdict(r.prefill) for r in reports if r.prefill is not None}
    if not figs:
        return ""
    lines = ["prefill key loop (a tile = one wave's row pair x 32 keys; cycles per tile, one wave):",
             "kernel                       occ vgpr/res  blocks/CU  mfma  valu  nop   issue  valu/mfma  "
             "LDS B  DMA B  fill cyc/elem"]
    for r in reports:
        f = r.prefill
        if f is None:
            continue
        lines.append(f"{r.source:<28} {f.waves_per_simd_vgpr}/{f.waves_per_simd_resident:<9g} {f.blocks_per_cu:<10} "
                     f"{f.mfma_cycles:<5.0f} {f.valu_cycles:<5.0f} {f.nop_wait_states:<5.1f} {f.issue_cycles:<6.1f} "
                     f"{f.valu_over_mfma():<10.2f} {f.lds_read_bytes:<6.0f} {f.dma_bytes:<6.0f} "
                     f"{f.fill_cycles_per_element:.2f}")
    rows = roofline.prefill_rows(figs)
    lines.append("\nestimated prefill times (tools/support/roofline.py: the decode fit's latency and overhead, "
                 "the prefill terms assumed; ESTIMATES, not measurements):\n" + roofline.format_prefill(rows))
    return "\n".join(lines)


def format_table(reports: list[KernelReport]) -> str:
    head = ["kernel", "vgpr", "agpr", "scr", "lds", "occ", "loop mfma/valu/vmem/lds/salu/wait/nop",
            "ld16", "tiles", "mfma cyc/tile", "valu cyc/tile", "valu/mfma", "nop ws/tile"]
    rows = []
    for r in reports:
        res = r.resources
        base = [r.source if r.source.endswith(r.name) or "/" in r.source else r.source, res.get("vgpr"),
                res.get("agpr"), res.get("scratch"), res.get("lds"), res.get("occupancy")]
        pt = r.per_tile()
        if r.loop is None or pt is None:
            rows.append(base + ["(no MFMA loop)", "", "", "", "", "", ""])
            continue
        c = r.loop.counts
        mix = f"{c['mfma']}/{c['valu']}/{c['vmem'] + c['vmem_lds']}/{c['lds']}/{c['salu'] + c['branch'] + c['barrier']}/{c['waitcnt']}/{c['nop']}"
        ld16 = sum(v for k, v in r.loop.global_load_widths.items() if k.startswith("dwordx4"))
        rows.append(base + [mix, ld16, f"{pt['tiles_per_iteration']:g}", f"{pt['mfma_cycles']:.0f}",
                            f"{pt['valu_cycles']:.0f}", f"{pt['valu_over_mfma']:.2f}", f"{pt['nop_wait_states']:.1f}"])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    fmt = lambda row: "  ".join(str(x).ljust(w) for x, w in zip(row, widths))  # noqa: E731
    return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])


def format_report(reports: list[KernelReport]) -> str:
    """The whole report as text: the kernels' table, the decode page loops and the prefill key loop, each with the
    estimated times tools/support/roofline.py gives them, and the cost model's rules."""
    parts = [format_table(reports)]
    dec = format_decode_table(reports)
    if dec:
        parts.append("paged decode page loops (a row = one row x one 64-key page; occ = waves per SIMD by VGPRs / "
                     "resident with LDS / the planner's grid):\n" + dec)
    figs = {r.source: asdict(r.decode) for r in reports if r.decode is not None}
    if figs:
        parts.append("estimated decode times (tools/support/roofline.py, calibrated on aiter's HIP decode kernel; "
                     "ESTIMATES, not measurements):\n" + roofline.format_goals(roofline.goal_estimates(figs)))
    pre = format_prefill_section(reports)
    if pre:
        parts.append(pre)
    parts.append("model: MFMA passes x 4 cycles (32x32x64 fp8 16 passes, 16x16x128 8); VALU 4 cycles per wave64 "
                 "instruction (v_pk_* f32 included; 64-bit 8, transcendental 16); s_nop N = N+1 wait states. "
                 "ld16 = 16-byte global loads in the loop (+lds: global->LDS DMA).")
    return "\n\n".join(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.support.isa_report", description=__doc__.splitlines()[0])
    ap.add_argument("asm", nargs="*", type=Path, help="gfx950 assembly files (default: the manifest's kernels)")
    ap.add_argument("--manifest", type=Path, default=None)
    ap.add_argument("--src", type=Path, default=None, help="kernel source root (default: hsaco_src)")
    ap.add_argument("--tile-mfmas", type=int, default=None, help="MFMAs per tile for the files given")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.asm:
        reports = [r for f in a.asm for r in report_asm(f.read_text(), str(f), a.tile_mfmas)]
    else:
        reports = manifest_reports(a.manifest, a.src)
    print(json.dumps([as_dict(r) for r in reports], indent=1) if a.json else format_report(reports))
    return 0


if __name__ == "__main__":
    sys.exit(main())
