#!/usr/bin/env python3
"""The hot loop's instruction mix of sm_90a code objects, from cuobjdump's SASS.

    python -m tools.support.sass_mix K.cubin [...]            # runs `cuobjdump -sass` on each
    python -m tools.support.sass_mix K.sass [...]             # or reads its saved output
    python -m tools.support.sass_mix --before DIR K.cubin     # beside the same-named object (.cubin or .sass) in DIR
    python -m tools.support.sass_mix --json ...

The hot loop is the innermost back edge (a branch to a lower address) whose address range holds the
most QGMMA (a range holding another QGMMA-bearing loop is an outer one, e.g. a unit loop). Its
instructions are counted once each, as laid out: a predicated-off path counts as much as a taken one, and out-of-line code the loop branches to (the
mbarrier retry loops ptxas moves past the kernel's end) is not counted. The classes are what bounds a
wgmma kernel: the MMAs themselves, the FP work of the epilogue, shared-memory traffic, synchronisation.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import click

_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P[0-9T]\s+)?([A-Z][A-Za-z0-9_.]*)([^;]*);")
_BRANCH = re.compile(r"^BRA(\.|$)")
_TARGET = re.compile(r"(?:^|\s)0x([0-9a-f]+)")
# class -> opcode prefixes (the first match wins; the order matters for prefixes of others)
CLASSES = [
    ("QGMMA", ("QGMMA", "HGMMA", "IGMMA")),
    ("WG.ARRIVE", ("WARPGROUP.ARRIVE",)),
    ("WG.DEPBAR", ("WARPGROUP.DEPBAR",)),
    ("DEPBAR", ("DEPBAR", "LDGDEPBAR")),
    ("BAR", ("BAR.",)),
    ("SYNCS", ("SYNCS", "ARRIVES")),
    ("FENCE", ("FENCE", "MEMBAR")),
    ("LDS", ("LDS", "LDSM")),
    ("STS", ("STS",)),
    ("LDGSTS", ("LDGSTS", "UBLKCP", "UTMALDG")),
    ("LDG", ("LDG", "LD.", "LDC", "ULDC")),
    ("STG", ("STG", "ST.")),
    ("SHFL", ("SHFL",)),
    ("FFMA", ("FFMA",)),
    ("FADD", ("FADD",)),
    ("FMUL", ("FMUL",)),
    ("FOTHER", ("FMNMX", "FSEL", "FSETP", "F2F", "F2FP", "HADD2", "HMUL2", "HFMA2", "MUFU", "F2I", "I2F")),
    ("UNIFORM", ("U", "R2UR", "S2UR")),
    ("INT", ("IMAD", "IADD", "VIADD", "ISETP", "LOP3", "LEA", "SHF", "SEL", "IMNMX", "VIMNMX", "IABS", "PLOP3",
             "P2R", "R2P", "PRMT", "POPC", "FLO", "S2R", "CS2R")),
    ("MOV", ("MOV",)),
    ("BRANCH", ("BRA", "BSSY", "BSYNC", "WARPSYNC", "CALL", "RET", "EXIT", "BPT")),
    ("NOP", ("NOP",)),
]
ORDER = [c for c, _ in CLASSES] + ["OTHER", "TOTAL"]


def classify(op: str) -> str:
    for name, prefixes in CLASSES:
        if any(op.startswith(p) for p in prefixes):
            return name
    return "OTHER"


def parse(text: str) -> dict[str, list[tuple[int, str, str]]]:
    """Function name -> [(address, opcode, operands)] in address order."""
    funcs, cur = {}, None
    for line in text.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = funcs.setdefault(m.group(1), [])
            continue
        m = _LINE.search(line)
        if m and cur is not None:
            cur.append((int(m.group(1), 16), m.group(3), ((m.group(2) or "") + m.group(4)).strip()))
    return funcs


def hot_loop(code: list[tuple[int, str, str]]) -> tuple[int, int] | None:
    """(first, last) address of the innermost back-edge range with the most QGMMA: a range that holds
    another QGMMA-bearing back edge's range is an outer loop (a unit loop around the stage loop)."""
    loops = []
    for addr, op, args in code:
        t = _TARGET.search(args) if _BRANCH.match(op) else None
        if t and int(t.group(1), 16) <= addr:
            lo = int(t.group(1), 16)
            mmas = sum(1 for a, o, _ in code if lo <= a <= addr and classify(o) == "QGMMA")
            if mmas:
                loops.append((lo, addr, mmas))
    inner = [(lo, hi, n) for lo, hi, n in loops
             if not any((lo2, hi2) != (lo, hi) and lo <= lo2 and hi2 <= hi for lo2, hi2, _ in loops)]
    if not inner:
        return None
    lo, hi, _ = max(inner, key=lambda x: (x[2], -(x[1] - x[0])))
    return lo, hi


def mix(code: list[tuple[int, str, str]]) -> dict:
    loop = hot_loop(code)
    body = [(a, o, r) for a, o, r in code if loop and loop[0] <= a <= loop[1]]
    counts = Counter(classify(o) for _, o, _ in body)
    counts["TOTAL"] = len(body)
    shapes = sorted({o for _, o, _ in body if classify(o) == "QGMMA"})
    regs = [int(r) for _, _, args in body for r in re.findall(r"\bR(\d+)\b", args)]
    whole = Counter(classify(o) for _, o, _ in code)
    return {
        "loop": [f"{loop[0]:#x}", f"{loop[1]:#x}"] if loop else None,
        "mma_shapes": shapes,
        "counts": {k: counts.get(k, 0) for k in ORDER if counts.get(k, 0) or k in ("QGMMA", "TOTAL")},
        "max_reg_in_loop": max(regs) if regs else None,
        "kernel_total": len(code),
        "kernel_local_memory": sum(1 for _, o, _ in code if o.startswith(("LDL", "STL"))),
        "kernel_qgmma": whole.get("QGMMA", 0),
    }


def sass_of(path: Path) -> str:
    if path.suffix == ".sass":
        return path.read_text()
    tool = shutil.which("cuobjdump")
    if not tool:
        raise click.ClickException("cuobjdump is not on PATH (give saved .sass files instead)")
    return subprocess.run([tool, "-sass", str(path)], capture_output=True, text=True, check=True).stdout


def report(path: Path) -> dict:
    return {fn: mix(code) for fn, code in parse(sass_of(path)).items()}


def _row(name: str, m: dict) -> str:
    c = m["counts"]
    cells = " ".join(f"{k}={c[k]}" for k in ORDER if k in c)
    return (f"{name}: loop {m['loop'] and '-'.join(m['loop'])}  {' '.join(m['mma_shapes'])}\n"
            f"  {cells}\n  max R{m['max_reg_in_loop']} in the loop; kernel: {m['kernel_total']} instructions, "
            f"{m['kernel_qgmma']} QGMMA, {m['kernel_local_memory']} LDL/STL")


@click.command()
@click.argument("objects", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--before", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="A folder with same-named objects (.cubin or .sass) to compare against.")
@click.option("--json", "as_json", is_flag=True)
def main(objects, before, as_json) -> None:
    out = {}
    for path in objects:
        entry = {"after": report(path)}
        if before:
            old = next((before / (path.stem + s) for s in (".cubin", ".sass") if (before / (path.stem + s)).exists()),
                       None)
            entry["before"] = report(old) if old else None
        out[path.stem] = entry
    if as_json:
        click.echo(json.dumps(out, indent=1))
        return
    for name, entry in out.items():
        for fn, m in entry["after"].items():
            click.echo(_row(f"{name} [{fn}]", m))
            old = entry.get("before") or {}
            b = old.get(fn) or (next(iter(old.values())) if len(old) == 1 and len(entry["after"]) == 1 else None)
            if b:
                click.echo(_row("  before", b))
                diff = {k: m["counts"].get(k, 0) - b["counts"].get(k, 0) for k in ORDER}
                click.echo("  after - before: " + (" ".join(f"{k}{v:+d}" for k, v in diff.items() if v) or "same mix"))


if __name__ == "__main__":
    sys.exit(main())
