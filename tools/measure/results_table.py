#!/usr/bin/env python3
"""Markdown results tables from `hipindexer bench ... --json` files, for docs/benchmarks.md.

    python -m tools.measure.results_table bench_prefill.json [bench_decode.json ...]

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


def decode_rows(doc: dict) -> list[str]:
    out = ["| spread | B | ctx | H | block | next_n | clean | kernel | median us | graph us | key GB/s | of read ceiling "
           "| TFLOP/s | host us/call |", "|" + " --- |" * 14]
    for r in doc["cases"]:
        g = "-" if r.get("us_graph") is None else f"{r['us_graph']:.1f}"
        out.append(f"| {r['spread']} | {r['B']} | {r['ctx']} | {r['H']} | {r.get('block_size', '-')} | {r['next_n']} "
                   f"| {r['clean']} | {r['kernel']} "
                   f"| {r['us']:.1f} | {g} | {r['GBps']:.0f} | {_pct(r.get('of_read'))} | {r['tflops']:.1f} "
                   f"| {r['host_us']:.1f} |")
    return out


def cache_rows(doc: dict) -> list[str]:
    out = ["| op | layout | scale | tokens | median us | graph us | GB/s | of copy ceiling | host us/call |",
           "|" + " --- |" * 9]
    for r in doc["cases"]:
        g = "-" if r.get("us_graph") is None else f"{r['us_graph']:.1f}"
        scale = "-" if r["op"] == "gather" else ("pow2" if r.get("power_of_two") else "amax/448")
        out.append(f"| {r['op']} | {'preshuffled' if r['preshuffle'] else 'block-flat'} | {scale} | {r['tokens']} "
                   f"| {r['us']:.1f} | {g} | {r['GBps']:.0f} | {_pct(r.get('of_copy'))} | {r['host_us']:.1f} |")
    return out


def generic_rows(doc: dict) -> list[str]:
    cases = doc["cases"]
    keys = [k for k in cases[0] if not isinstance(cases[0][k], (dict, list))] if cases else []
    out = ["| " + " | ".join(keys) + " |", "|" + " --- |" * len(keys)]
    for r in cases:
        out.append("| " + " | ".join(f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k]) for k in keys) + " |")
    return out


def table(doc: dict) -> str:
    rows = {"prefill": prefill_rows, "decode": decode_rows, "cache": cache_rows}.get(doc.get("op", "prefill"),
                                                                                   generic_rows)(doc)
    return "\n".join(_head(doc) + rows) + "\n"


def main(paths: list[str]) -> int:
    for p in paths:
        with open(p) as f:
            doc = json.load(f)
        for d in doc if isinstance(doc, list) else [doc]:  # a device script may keep several runs in one file
            print(table(d))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
