"""Where a kernel's time goes, without counters: builds of it with one stage left out, timed side by side.

    python tools/stage_variants.py --set sm90a_decode --builds DIR --build-only        # compile here ...
    python tools/stage_variants.py --set sm90a_decode --builds DIR --prebuilt \\
        -- bench decode --device cuda:0 --rows equal:64x131072 --heads 64 --next-n 1,2 --repeats 5   # ... time there

A variant is a list of text substitutions on a copy of hsaco_src/, like a plant of tools/mutate.py, but its
outputs are wrong on purpose: only its time means anything. Each variant is built into its own package copy
(tools/package_copy.py), starting from the shipped build's objects, and the command after `--` (a
`hipindexer.cli` command that prints --json) runs on each copy in turn; the table lists each case's median
microseconds per variant and the fraction of the shipped build's time.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tools.mutate import Plant, build_planted  # noqa: E402
from tools.package_copy import PackageCopy  # noqa: E402

DEC = "sm90a/paged_mqa_logits_wgmma.hip"
CTA = "sm90a/decode_cta.h"
LOADER = "sm90a/decode_loader.h"
TMA = "sm90a/paged_mqa_logits_wgmma_tma.hip"
TMA_CTA = "sm90a/decode_tma_cta.h"
TMA_LOADER = "sm90a/decode_tma_loader.h"
COMMON = "sm90a/decode_common.h"  # the math pass both decode kernels share


def _mma_only() -> Plant:
    """The MMA kept, its epilogue reduced to one add and a store that never happens."""
    return Plant("mma_only", COMMON, "  hx_wgmma_wait<0>();\n  hx_fence_regs(acc);\n",
                 "  hx_wgmma_wait<0>();\n  hx_fence_regs(acc);\n"
                 "  if (c.n == -7) hx_store_f32_if(true, c.out, acc[0] + acc[NACC - 1]);\n  if (c.n != -8) return;\n")


def _no_math(f: str) -> Plant:
    """The math warpgroups take each stage and give it back."""
    return Plant("no_math", f, "for (hx_i32 pb = 0; pb < live; pb += RMAX) {", "for (hx_i32 pb = 0; pb < 0 * live; pb += RMAX) {")


_NO_REPACK = [
    Plant("no_lds", LOADER, "for (int i = 0; i < 4; ++i) x[i] = lds_128(stage + src[i]);",
          "for (int i = 0; i < 4; ++i) x[i] = hx_u32x4{0u, 0u, 0u, (hx_u32)i};"),
    Plant("no_sts", LOADER, "for (int i = 0; i < 4; ++i) sts_128(atile + dst[i], x[i]);",
          "for (int i = 0; i < 4; ++i) if (x[i].x == 1u) sts_128(atile + dst[i], x[i]);"),
]

VARIANTS = {
    # paged_mqa_logits_wgmma: bulk copies of whole pages, a repack warpgroup, two math warpgroups
    "sm90a_decode": {
        "shipped": [],
        "mma_only": [_mma_only()],
        "no_math": [_no_math(DEC)],
        # ... and the repack moves no bytes: the bulk copies and the rings alone
        "no_math_no_repack": [_no_math(DEC), *_NO_REPACK],
        # the repack moves no bytes, the math as shipped
        "no_repack": _NO_REPACK,
        # a raw ring of at most 8 stages
        "raw_ring_8": [Plant("ring8", CTA, "constexpr hx_u32 SRMAX = 24;", "constexpr hx_u32 SRMAX = 8;")],
    },
    # paged_mqa_logits_wgmma_tma: tensor copies, two page warps, three math warpgroups
    "sm90a_decode_tma": {
        "shipped": [],
        "mma_only": [_mma_only()],
        "no_math": [_no_math(TMA)],
        # no scale copies (the stage expects the keys' bytes alone; whole pages bring theirs anyway)
        "no_scales": [Plant("no_scale_copy", TMA_LOADER, "hx_bulk_g2s(sm.base + SC_OFF", "if (false) hx_bulk_g2s(sm.base + SC_OFF"),
                      Plant("keys_bytes", TMA_LOADER, "(hx_u32)__popc(good) * page);", "(hx_u32)__popc(good) * kbytes);")],
        # one page warp for every stage (warp 2 idle)
        "one_page_warp": [Plant("one_pw", TMA_LOADER, "if ((it & 1) != parity) continue;", "if (parity) break;")],
        # the epilogue without the FADD of relu (|x| x w, one FFMA an accumulator: what folding the ReLU's linear
        # half into the MMA would leave)
        "no_relu_fadd": [Plant("no_relu_fadd", COMMON, "sum = __fmaf_rn(x + __builtin_fabsf(x), w2[2 * jj + cc], sum);",
                               "sum = __fmaf_rn(__builtin_fabsf(x), w2[2 * jj + cc], sum);")],
        # a stage ring of at most 12 stages
        "ring_12": [Plant("ring_12", TMA_CTA, "constexpr hx_u32 SRMAX = 24;", "constexpr hx_u32 SRMAX = 12;")],
        # the loader alone (no_math) with one thing changed: block-flat pages by one plain bulk copy each (the same
        # bytes, unswizzled; block_size 64 only: a bulk copy moves whole 16-byte units, a 16-token page is 2112
        # bytes) instead of the tensor copy; one page warp for every stage; a ring of at most 12 stages
        "no_math_bulk_pages": [_no_math(TMA), Plant(
            "bulk_pages", TMA_LOADER, "    hx_tma_load_3d(dst, p.kv_map, 0, 0, id, bar);",
            "    hx_bulk_g2s(dst, p.kv_cache + (hx_i64)id * hx_block_bytes(p.block_size, D), "
            "hx_block_bytes(p.block_size, D), bar);")],
        "no_math_one_page_warp": [_no_math(TMA), Plant("one_pw", TMA_LOADER, "if ((it & 1) != parity) continue;",
                                                       "if (parity) break;")],
        "no_math_ring_12": [_no_math(TMA), Plant("ring_12", TMA_CTA, "constexpr hx_u32 SRMAX = 24;",
                                                 "constexpr hx_u32 SRMAX = 12;")],
    },
}


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--set", "vset", type=click.Choice(sorted(VARIANTS)), required=True)
@click.option("--builds", type=click.Path(path_type=Path), required=True)
@click.option("--variants", default=None, help="Comma-separated names (default: all of the set).")
@click.option("--build-only", is_flag=True)
@click.option("--prebuilt", is_flag=True)
@click.option("--timeout", default=300)
@click.option("--graph", is_flag=True, help="Compare graph-replay times where the benchmark measured them.")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
def main(vset, builds, variants, build_only, prebuilt, timeout, graph, cmd):
    chosen = {k: v for k, v in VARIANTS[vset].items() if variants is None or k in variants.split(",") or k == "shipped"}
    if not build_only and not cmd:
        raise click.UsageError("give the command to time after --")
    times: dict[str, dict[str, float]] = {}
    for name, subs in chosen.items():
        d = builds / name
        if not prebuilt:
            b = build_planted(d, builds / "shipped", subs, ["sm_90a"])
            if b.returncode:
                click.echo(f"{name}: build failed: {(b.stderr.strip().splitlines() or ['?'])[-1]}")
                continue
            for junk in ("src", "work"):
                shutil.rmtree(d / junk, ignore_errors=True)
            shutil.rmtree(d / "pkg" / "work", ignore_errors=True)
        if build_only:
            click.echo(f"{name}: built")
            continue
        if not (d / "pkg").is_dir():
            click.echo(f"{name}: not built (in {d})")
            continue
        r = PackageCopy(d / "pkg").run(["-m", "hipindexer.cli", *cmd, "--json"], timeout=timeout)
        try:
            doc = json.loads(r.stdout)
        except ValueError:
            click.echo(f"{name}: no result (exit {r.returncode}): {r.stderr.strip()[-300:]}")
            continue
        for c in doc["cases"]:
            case = f"B={c['B']} ctx={c['ctx']} H={c['H']} n={c['next_n']} bs={c['block_size']}"
            times.setdefault(case, {})[name] = c["us_graph"] if graph and c.get("us_graph") else c["us"]
        click.echo(f"{name}: done", err=True)
    if times:
        names = list(chosen)
        click.echo(f"{'case':40s}" + "".join(f"{n:>20s}" for n in names))
        for case, row in times.items():
            base = row.get("shipped")
            cells = [f"{row[n]:9.1f} us" + (f" {row[n] / base:5.2f}x" if base else "") if n in row else "-" for n in names]
            click.echo(f"{case:40s}" + "".join(f"{c:>20s}" for c in cells))


if __name__ == "__main__":
    main()
