#!/usr/bin/env python3
"""Markdown results tables from `hipindexer bench ... --json` files, for docs/benchmarks.md.

    python tools/results_table.py bench_prefill.json [bench_decode.json ...]

Each file becomes one dated section: the device, its driver, the ceilings the
same run measured, then one row per case with medians and fractions of those
ceilings. Nothing is computed here that the run did not measure.
"""
from __future__ import annotations

import json
import sys


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _head(doc: dict) -> list[str]:
    lines = [f"### {doc.get('op', 'prefill')}: {doc.get('device', '?')}, {doc.get('date', 'undated')}", ""]
    facts = [f"driver {doc['driver']}" if doc.get("driver") else None,
             f"copy ceiling {doc['copy_GBps']:.0f} GB/s (our copy kernel, read + write)" if doc.get("copy_GBps") else None,
             f"read ceiling {doc['read_GBps']:.0f} GB/s (our streaming-read kernel)" if doc.get("read_GBps") else None,
             f"fp8 matrix ceiling {doc['matrix_peak_TFLOPs']:.0f} TFLOP/s (our peak loop)"
             if doc.get("matrix_peak_TFLOPs") else None]
    lines.append("Same-run ceilings: " + "; ".join(f for f in facts if f) + ".")
    if doc.get("emulated"):
        lines.append("EMULATED: these times measure the CPU emulator, not a GPU.")
    return lines + [""]


def prefill_rows(doc: dict) -> list[str]:
    out = ["| M | N | H | clean | kernel | class | median us | TFLOP/s | of matrix ceiling | host us/call |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in doc["cases"]:
        out.append(f"| {r['M']} | {r['N']} | {r['H']} | {r['clean']} | {r['kernel']} | {r.get('accumulation', '-')} "
                   f"| {r['us']:.1f} | {r['tflops']:.1f} | {_pct(r.get('of_matrix_peak'))} | {r['host_us']:.1f} |")
    return out


def generic_rows(doc: dict) -> list[str]:
    cases = doc["cases"]
    keys = [k for k in cases[0] if not isinstance(cases[0][k], (dict, list))] if cases else []
    out = ["| " + " | ".join(keys) + " |", "|" + " --- |" * len(keys)]
    for r in cases:
        out.append("| " + " | ".join(f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k]) for k in keys) + " |")
    return out


def table(doc: dict) -> str:
    rows = prefill_rows(doc) if doc.get("op", "prefill") == "prefill" else generic_rows(doc)
    return "\n".join(_head(doc) + rows) + "\n"


def main(paths: list[str]) -> int:
    for p in paths:
        with open(p) as f:
            print(table(json.load(f)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
