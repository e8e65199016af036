"""The hipindexer command line: JSON or tables to stdout, progress to stderr.

Exit codes: 0 success, 1 a failed check, 2 usage, 3 a command needs a GPU and there is none.
"""
from __future__ import annotations

import json
import sys

import click
import numpy as np

NO_GPU_EXIT = 3


def _progress(msg: str) -> None:
    click.echo(msg, err=True)


def _table(rows: list[list], header: list[str]) -> str:
    cols = [header] + [[str(x) for x in r] for r in rows]
    widths = [max(len(r[i]) for r in cols) for i in range(len(header))]
    fmt = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths))  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in cols[1:]])


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="hipindexer")
def main() -> None:
    """Lightning-indexer kernels: fp8 MQA logits for prefill and paged decode."""


@main.command()
@click.option("--quick", is_flag=True, help="The small sweep (CI size).")
@click.option("--seed", default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcomes as JSON.")
def check(quick: bool, seed: int, as_json: bool) -> None:
    """Check the numpy reference against per-element float64 formulations of both ops."""
    from .sweep import FAIL, reference_cases, tally
    rng = np.random.default_rng(seed)
    cases = list(reference_cases(quick))
    outcomes = []
    for i, case in enumerate(cases):
        o = case(rng)
        outcomes.append(o)
        if o.status == FAIL:
            _progress(f"FAIL {o.op} {o.case}: {o.message}")
        elif (i + 1) % 20 == 0 or i + 1 == len(cases):
            _progress(f"[{i + 1}/{len(cases)}]")
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


def _build_module():
    """build.py of the source checkout this package runs from, or None (an installed wheel has none)."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parent.parent / "build.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("_hx_build", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["_hx_build"] = mod
    spec.loader.exec_module(mod)
    return mod


@main.command(context_settings={"ignore_unknown_options": True, "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def build(args) -> None:
    """Compile the kernel sources into code objects (build.py; --help for its options)."""
    mod = _build_module()
    if mod is None:
        raise click.ClickException("hipindexer build needs a source checkout (build.py and hsaco_src/); "
                                   "an installed wheel already carries its code objects")
    sys.exit(mod.main(list(args)))


def _toolchains() -> dict:
    mod = _build_module()
    if mod is None:
        return {"note": "no source checkout: toolchains are only needed to build"}
    from pathlib import Path
    found = {}
    for target in mod.TARGETS:
        try:
            tc = mod.find_toolchain(target, Path(mod.ROOT) / "build")
            found[target] = {"mode": tc.mode, "path": str(tc.path), "version": tc.version}
        except Exception as e:  # a missing toolchain is information here, not an error
            found[target] = {"missing": str(e)}
    return found


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def info(as_json: bool) -> None:
    """Backends, devices and their arch, toolchains, and every kernel of the manifest with its resources."""
    from .runtime.info import collect_info
    report = collect_info()
    report["toolchains"] = _toolchains()
    if as_json:
        click.echo(json.dumps(report, indent=1, default=str))
        return
    for b in report["backends"]:
        state = f"{b.get('device_count', 0)} device(s)" if b.get("available") else f"unavailable: {b.get('why_not')}"
        click.echo(f"backend {b['name']}: {state}")
    for d in report["devices"]:
        click.echo(f"device {d['spec']}: " + (d.get("error") or f"{d['name']} ({d['arch']}, {d['num_cus']} CUs)"))
    for t, tc in report["toolchains"].items():
        click.echo(f"toolchain {t}: {tc}")
    m = report["manifest"]
    if not m.get("present"):
        click.echo(f"manifest: missing ({m.get('why_not')})")
        return
    click.echo(f"manifest {m['path']}: targets {', '.join(m['targets'])}")
    rows = []
    for k in m["kernels"]:
        r = k.get("resources", {})
        res = (f"vgpr {r.get('vgpr')} agpr {r.get('agpr')} sgpr {r.get('sgpr')} lds {r.get('lds')} "
               f"scratch {r.get('scratch')} occ {r.get('occupancy')}" if k["target"] == "gfx950" else
               f"regs {r.get('registers')} smem {r.get('shared')} spill {r.get('spill_stores')}/{r.get('spill_loads')}")
        rows.append([k["target"], k["variant_key"], k["param_size"], res])
    click.echo(_table(rows, ["target", "kernel", "params", "resources"]))


if __name__ == "__main__":
    main()
