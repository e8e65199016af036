"""The hipindexer command line: JSON or tables to stdout, progress to stderr.

Exit codes: 0 success, 1 a failed check, 2 usage, 3 a command needs a GPU and there is none.
"""
from __future__ import annotations

import json
import math
import sys

import click
import numpy as np

NO_GPU_EXIT = 3


def _progress(msg: str) -> None:
    click.echo(msg, err=True)


def _table(rows: list[list], header: list[str]) -> str:
    cols = [header] + [[str(x) for x in r] for r in rows]
    widths = [max(len(r[i]) for r in cols) for i in range(len(header))]
    fmt = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in cols[1:]])


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="hipindexer")
def main() -> None:
    """Lightning-indexer kernels: fp8 MQA logits for prefill and paged decode."""


def _report(outcomes, as_json: bool) -> None:
    from .sweep import tally
    by_op = {}
    for o in outcomes:
        by_op.setdefault(o.op, []).append(o)
    summary = {op: tally(os) for op, os in by_op.items()}
    if as_json:
        click.echo(json.dumps({"summary": summary, "cases": [o.__dict__ for o in outcomes]}, indent=1))
    else:
        rows = [[op, t["run"], t["passed"], t["failed"], t["not applicable"]] for op, t in summary.items()]
        click.echo(_table(rows, ["op", "run", "passed", "failed", "not applicable"]))
        for o in outcomes:
            if o.status == "not applicable":
                click.echo(f"not applicable: {o.op} {o.case} ({o.message})")
    if any(t["failed"] for t in summary.values()):
        sys.exit(1)


def _run_cases(cases, run) -> list:
    from .sweep import FAIL
    outcomes = []
    for i, case in enumerate(cases):
        o = run(case)
        outcomes.append(o)
        if o.status == FAIL:
            _progress(f"FAIL {o.op} {o.case}: {o.message}")
        elif (i + 1) % 20 == 0 or i + 1 == len(cases):
            _progress(f"[{i + 1}/{len(cases)}]")
    return outcomes


@main.group(invoke_without_command=True)
@click.option("--quick", is_flag=True, help="The small sweep (CI size).")
@click.option("--seed", default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcomes as JSON.")
@click.pass_context
def check(ctx, quick: bool, seed: int, as_json: bool) -> None:
    """Correctness sweeps. Bare: the numpy reference against per-element float64 formulations."""
    if ctx.invoked_subcommand is not None:
        return
    from .sweep import reference_cases
    rng = np.random.default_rng(seed)
    _report(_run_cases(list(reference_cases(quick)), lambda c: c(rng)), as_json)


def _device_or_exit(spec):
    from .runtime import Device, NoDeviceError
    try:
        return Device(spec)
    except NoDeviceError as e:
        click.echo(f"Error: {e}", err=True)
        sys.exit(NO_GPU_EXIT)


@check.command("prefill")
@click.option("--device", "device_spec", default=None, help="cuda:0, hip:0 or emu:gfx950 (default: the first GPU).")
@click.option("--quick", is_flag=True, help="Small shapes only (CI size).")
@click.option("--seed", default=0, show_default=True)
@click.option("--heads", default="32,64,16", show_default=True)
@click.option("--dims", default="64,128", show_default=True)
@click.option("--shapes", default=None, help="MxN,... (default: hipindexer.sweep.PREFILL_SHAPES, or --quick's).")
@click.option("--reruns", default=20, show_default=True, help="Bitwise-identical reruns of one large case (0: skip).")
@click.option("--kernel", default=None, help="Force a kernel (default: the planner's choice).")
@click.option("--json", "as_json", is_flag=True)
def check_prefill(device_spec, quick, seed, heads, dims, shapes, reruns, kernel, as_json) -> None:
    """fp8_mqa_logits on a device against the reference, every window mode, both clean_logits."""
    from .sweep import bitwise_reruns, prefill_device_case, prefill_device_cases
    dev = _device_or_exit(device_spec)
    _progress(f"device {dev!r}")
    rng = np.random.default_rng(seed)
    shp = tuple(tuple(int(x) for x in s.split("x")) for s in shapes.split(",")) if shapes else None
    cases = list(prefill_device_cases(quick, tuple(int(h) for h in heads.split(",")),
                                      tuple(int(d) for d in dims.split(",")), shp))
    forced = {"kernel": kernel} if kernel else {}
    outcomes = _run_cases(cases, lambda c: prefill_device_case(rng, dev, *c, **forced))
    if reruns and not quick:
        outcomes.append(bitwise_reruns(rng, dev, runs=reruns, **forced))
    _report(outcomes, as_json)


def _checkout_module(relpath: str):
    """A file of the source checkout this package runs from (build.py, tools/...), loaded by path;
    None where there is none (an installed wheel carries neither)."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parent.parent / relpath
    if not path.is_file():
        return None
    name = "_hx_" + path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up while defining
    spec.loader.exec_module(mod)
    return mod


@main.command(context_settings={"ignore_unknown_options": True, "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def build(args) -> None:
    """Compile the kernel sources into code objects (build.py; --help for its options)."""
    mod = _checkout_module("build.py")
    if mod is None:
        raise click.ClickException("hipindexer build needs a source checkout (build.py and hsaco_src/); "
                                   "an installed wheel already carries its code objects")
    sys.exit(mod.main(list(args)))


def _toolchains() -> dict:
    """target -> {mode, path, version[, ptxas, ptxas_version]} or {missing: why}; {note} without a checkout."""
    mod = _checkout_module("build.py")
    if mod is None:
        return {"note": "no source checkout here: toolchains are only needed to build"}
    from pathlib import Path
    found = {}
    for target in mod.TARGETS:
        try:
            tc = mod.find_toolchain(target, Path(mod.ROOT) / "build")
            found[target] = {"mode": tc.mode, "path": str(tc.path), "version": tc.version}
            if tc.ptxas:
                found[target].update(ptxas=tc.ptxas, ptxas_version=tc.ptxas_version)
        except Exception as e:  # a missing toolchain is information here, not an error
            found[target] = {"missing": str(e)}
    return found


def _toolchain_lines(toolchains: dict) -> list[str]:
    if "note" in toolchains:
        return [f"toolchains: {toolchains['note']}"]
    lines = []
    for target, tc in toolchains.items():
        if "missing" in tc:
            lines.append(f"toolchain {target}: missing: {tc['missing']}")
            continue
        line = f"toolchain {target}: {tc['mode']}, {tc['path']}, {tc['version']}"
        if tc.get("ptxas"):
            line += f"; ptxas {tc['ptxas']}, {tc['ptxas_version']}"
        lines.append(line)
    return lines


def _with_accumulation(manifest: dict) -> None:
    """Each kernel's accumulation class from the catalog (None: it computes no logits); the runtime's
    report knows code objects, not what they compute."""
    from . import catalog
    manifest["accumulation_classes"] = dict(catalog.ACCUMULATION)
    for k in manifest.get("kernels", []):
        known = catalog.KERNEL.get(k["name"])
        k["accumulation"] = known.accumulation if known else "not in the catalog"


def _kernel_table(kernels: list[dict]) -> str:
    rows = []
    for k in kernels:
        r = k.get("resources", {})
        res = (f"vgpr {r.get('vgpr')} agpr {r.get('agpr')} sgpr {r.get('sgpr')} lds {r.get('lds')} "
               f"scratch {r.get('scratch')} occ {r.get('occupancy')}" if k["target"] == "gfx950" else
               f"regs {r.get('registers')} smem {r.get('shared')} spill {r.get('spill_stores')}/{r.get('spill_loads')}")
        rows.append([k["target"], k["variant_key"], k["param_size"], k.get("dynamic_smem", 0),
                     k.get("accumulation") or "-", res])
    return _table(rows, ["target", "kernel", "params", "dynamic smem", "accumulation", "resources"])


def _isa_info(as_json: bool) -> None:
    mod = _checkout_module("tools/isa_report.py")
    if mod is None:
        raise click.ClickException("hipindexer info --isa needs a source checkout (tools/isa_report.py and "
                                   "hsaco_src/) and a gfx950 compiler: it recompiles each kernel with -S")
    from .runtime.module import DEFAULT_MANIFEST
    reports = mod.manifest_reports(DEFAULT_MANIFEST)
    if as_json:
        click.echo(json.dumps([mod.as_dict(r) for r in reports], indent=1))
    else:
        click.echo(mod.format_table(reports))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--isa", is_flag=True, help="gfx950 ISA report instead: resources and each kernel's hot loop "
                                          "(instruction mix, MFMA and VALU cycles per tile; tools/isa_report.py).")
def info(as_json: bool, isa: bool) -> None:
    """Backends, devices and their arch, toolchains, and every kernel of the manifest with its resources,
    dynamic shared memory and accumulation class ("-": it computes no logits)."""
    if isa:
        _isa_info(as_json)
        return
    from .runtime.info import collect_info
    report = collect_info()
    report["toolchains"] = _toolchains()
    if report["manifest"].get("present"):
        _with_accumulation(report["manifest"])
    if as_json:
        click.echo(json.dumps(report, indent=1, default=str))
        return
    for b in report["backends"]:
        state = f"{b.get('device_count', 0)} device(s)" if b.get("available") else f"unavailable: {b.get('why_not')}"
        click.echo(f"backend {b['name']}: {state}")
    for d in report["devices"]:
        click.echo(f"device {d['spec']}: " + (d.get("error") or f"{d['name']} ({d['arch']}, {d['num_cus']} CUs)"))
    for line in _toolchain_lines(report["toolchains"]):
        click.echo(line)
    m = report["manifest"]
    if not m.get("present"):
        click.echo(f"manifest: missing ({m.get('why_not')})")
        return
    click.echo(f"manifest {m['path']}: targets {', '.join(m['targets'])}")
    click.echo(_kernel_table(m["kernels"]))
    classes = ", ".join(f"{c} (eps 2^{math.log2(e):g})" for c, e in m["accumulation_classes"].items())
    click.echo(f"accumulation classes: {classes}: |out - ref| <= eps * A per element (hipindexer.gate)")


@main.group()
def bench() -> None:
    """Benchmarks (device time by events, host time per call, ceilings measured on the same run)."""


@bench.command("prefill")
@click.option("--device", "device_spec", default=None)
@click.option("--shapes", default=None, help="MxN,... (default: the five shapes of DESIGN.md's method)")
@click.option("--heads", default="64,32", show_default=True)
@click.option("--dim", default=128, show_default=True)
@click.option("--clean", type=click.Choice(["true", "false", "both"]), default="both", show_default=True)
@click.option("--repeats", default=10, show_default=True)
@click.option("--kernel", default=None, help="Force a kernel (default: the planner's choice).")
@click.option("--json", "as_json", is_flag=True)
def bench_prefill_cmd(device_spec, shapes, heads, dim, clean, repeats, kernel, as_json) -> None:
    """fp8_mqa_logits, causal single request, against the measured bandwidth ceiling."""
    from .bench import PREFILL_BENCH_SHAPES, bench_prefill, copy_bandwidth, matrix_peak
    dev = _device_or_exit(device_spec)
    shp = (tuple(tuple(int(x) for x in s.split("x")) for s in shapes.split(",")) if shapes
           else PREFILL_BENCH_SHAPES)
    cleans = {"true": [True], "false": [False], "both": [True, False]}[clean]
    _progress(f"device {dev!r}: measuring the copy ceiling")
    bw = copy_bandwidth(dev)
    _progress("measuring the matrix-rate ceiling")
    peak = matrix_peak(dev)
    rows = []
    for (M, N) in shp:
        for H in (int(h) for h in heads.split(",")):
            for cl in cleans:
                _progress(f"M={M} N={N} H={H} clean={cl}")
                r = bench_prefill(dev, M, N, H, dim, cl, repeats, **({"kernel": kernel} if kernel else {}))
                r["of_matrix_peak"] = r["tflops"] * 1e12 / peak if peak else None
                r["GBps"] = r["bytes"] / (r["us"] * 1e-6) / 1e9
                r["of_copy"] = r["GBps"] * 1e9 / bw
                rows.append(r)
    if as_json:
        click.echo(json.dumps({"device": repr(dev), "copy_GBps": bw / 1e9,
                               "matrix_peak_TFLOPs": peak / 1e12 if peak else None, "cases": rows}, indent=1))
        return
    click.echo(f"bandwidth ceiling (our copy kernel, read + write): {bw / 1e9:.0f} GB/s")
    click.echo("matrix-rate ceiling (our fp8 peak loop): " + (f"{peak / 1e12:.0f} TFLOP/s" if peak else "none for this target"))
    pct = lambda x: f"{100 * x:.1f}%" if x is not None else "-"  # noqa: E731
    click.echo(_table([[r["M"], r["N"], r["H"], r["clean"], r["kernel"], f"{r['us']:.1f}", f"{r['tflops']:.1f}",
                        pct(r["of_matrix_peak"]), f"{r['GBps']:.0f}", pct(r["of_copy"]), f"{r['host_us']:.1f}"]
                       for r in rows],
                      ["M", "N", "H", "clean", "kernel", "median us", "TFLOP/s", "of matrix peak", "GB/s",
                       "of copy", "host us/call"]))


if __name__ == "__main__":
    main()
