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


class _Group(click.Group):
    """Usage errors as one line on stderr and exit code 2, never a traceback or a usage block."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as e:
            click.echo(f"Error: {e.format_message()}", err=True)
            sys.exit(2)
        except click.ClickException as e:
            e.show()
            sys.exit(e.exit_code)
        except click.exceptions.Abort:
            click.echo("Aborted.", err=True)
            sys.exit(1)
        sys.exit(0)


class IntList(click.ParamType):
    """Comma-separated positive integers: "32,64"."""
    name = "N,N,..."

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            out = tuple(int(x) for x in str(value).split(","))
        except ValueError:
            self.fail(f"expected comma-separated integers such as 32,64, got {value!r}", param, ctx)
        if not out or min(out) < 1:
            self.fail(f"expected integers >= 1, got {value!r}", param, ctx)
        return out


class NextNs(click.ParamType):
    """Comma-separated next_n values of bench decode: 1..8 each, or ragged."""
    name = "N,...|ragged"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        out = tuple(x.strip() for x in str(value).split(","))
        if not out or any(x != "ragged" and not (x.isdigit() and 1 <= int(x) <= 8) for x in out):
            self.fail(f"expected comma-separated next_n values, each 1..8 or ragged, got {value!r}", param, ctx)
        return tuple(x if x == "ragged" else str(int(x)) for x in out)


class DecodeRows(click.ParamType):
    """Comma-separated decode bench rows SPREAD:BxCTX: "equal:64x32768,one_long:16x131072"."""
    name = "SPREAD:BxCTX,..."

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            out = tuple((r.split(":")[0], *(int(x) for x in r.split(":")[1].split("x"))) for r in str(value).split(","))
            if any(len(t) != 3 or t[0] not in ("equal", "pm30", "one_long") or min(t[1:]) < 1 for t in out):
                raise ValueError
        except (ValueError, IndexError):
            self.fail(f"expected SPREAD:BxCTX,... with SPREAD equal, pm30 or one_long and B, CTX >= 1, got {value!r}",
                      param, ctx)
        return out


class Shapes(click.ParamType):
    """Comma-separated MxN pairs: "128x1024,1x113"."""
    name = "MxN,..."

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            out = tuple(tuple(int(x) for x in s.split("x")) for s in str(value).split(","))
        except ValueError:
            out = ()
        if not out or any(len(s) != 2 or min(s) < 1 for s in out):
            self.fail(f"expected comma-separated MxN pairs of positive integers such as 128x1024,1x113, "
                      f"got {value!r}", param, ctx)
        return out


DEVICE_HELP = ("The device: cuda:N, hip:N, or emu:gfx950 (the CPU emulator of the gfx950 kernels, in a source "
               "checkout after python build.py). Default: the first GPU, HIP then CUDA.")
ACCUMULATION_HELP = "fast: the fastest kernel of any accumulation class; fp32: fp32-class kernels only."
# Options several commands take, declared once.
device_option = click.option("--device", "device_spec", default=None, help=DEVICE_HELP)
kernel_option = click.option("--kernel", default=None, help="Force a kernel (default: the planner's choice).")
accumulation_option = click.option("--accumulation", type=click.Choice(["fast", "fp32"]), default="fast",
                                   show_default=True, help=ACCUMULATION_HELP)
json_option = click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
# numpy's default_rng refuses negative seeds.
SEED = click.IntRange(min=0)
verbose_option = click.option("--verbose", "-v", is_flag=True, help="List every case that does not apply.")
fail_fast_option = click.option("--fail-fast", "-x", is_flag=True,
                                 help="Stop at the first failed case; the report lists the cases run.")
reruns_option = click.option("--reruns", type=click.IntRange(min=0), default=20, show_default=True,
                             help="Bitwise-identical reruns of one large case (0: skip).")


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="hipindexer")
def main() -> None:
    """Lightning-indexer kernels: fp8 MQA logits for prefill and paged decode."""


def _pow2(x: float) -> str:
    import math
    return "0" if x <= 0 else f"{x:.2e} (2^{math.log2(x):.1f})"


def _report(outcomes, as_json: bool, verbose: bool = False) -> None:
    from .check.sweep import kernel_figures, tally
    by_op = {}
    for o in outcomes:
        by_op.setdefault(o.op, []).append(o)
    summary = {op: tally(os) for op, os in by_op.items()}
    figures = kernel_figures(outcomes)
    if as_json:
        click.echo(json.dumps({"summary": summary, "kernels": figures, "cases": [o.__dict__ for o in outcomes]},
                              indent=1))
    else:
        rows = [[op, t["run"], t["passed"], t["failed"], t["not applicable"]] for op, t in summary.items()]
        click.echo(_table(rows, ["op", "run", "passed", "failed", "not applicable"]))
        if figures:
            click.echo(_table([[k, f["cases"], _pow2(f["max_err_over_a"]), f["exceptions"],
                                f"{f['worst_exception']:.2e}" if f["exceptions"] else "-"]
                               for k, f in figures.items()],
                              ["kernel", "cases", "max |out - ref| / A", "rows excused", "worst excused row"]))
        reasons = {}
        for o in outcomes:
            if o.status == "not applicable":
                reasons.setdefault(o.message.split(" (")[0], []).append(o)
        for why, os_ in reasons.items():
            click.echo(f"not applicable: {len(os_)} cases: {why}" + ("" if verbose else " (--verbose lists them)"))
            if verbose:
                for o in os_:
                    click.echo(f"  {o.op} {o.case} ({o.message})")
    if any(t["failed"] for t in summary.values()):
        sys.exit(1)


def _run_cases(cases, run, fail_fast=False) -> list:
    """Run every case (fail_fast: up to the first that fails); failures are printed as they happen, progress
    goes to stderr: a bar on a terminal, a plain counter otherwise (logs)."""
    from .check.sweep import FAIL
    outcomes = []
    tty = sys.stderr.isatty()
    with click.progressbar(length=len(cases), file=sys.stderr, label="cases") if tty else _NoBar() as bar:
        for i, case in enumerate(cases):
            o = run(case)
            outcomes.append(o)
            if o.status == FAIL:
                _progress(f"\nFAIL {o.op} {o.case}: {o.message}" if tty else f"FAIL {o.op} {o.case}: {o.message}")
                if fail_fast:
                    break
            elif not tty and ((i + 1) % 20 == 0 or i + 1 == len(cases)):
                _progress(f"[{i + 1}/{len(cases)}]")
            bar.update(1)
    return outcomes


def _failed(outcomes) -> bool:
    from .check.sweep import FAIL
    return any(o.status == FAIL for o in outcomes)


class _NoBar:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n):
        pass


@main.group(invoke_without_command=True)
@click.option("--quick", is_flag=True, help="The small sweep (CI size).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the random inputs.")
@json_option
@verbose_option
@click.pass_context
def check(ctx, quick: bool, seed: int, as_json: bool, verbose: bool) -> None:
    """Correctness sweeps. Bare: the numpy reference against per-element float64 formulations."""
    if ctx.invoked_subcommand is not None:
        return
    from .check.sweep import reference_cases
    rng = np.random.default_rng(seed)
    _report(_run_cases(list(reference_cases(quick)), lambda c: c(rng)), as_json, verbose)


def _device_or_exit(spec):
    """The device of --device; a malformed spec is a usage error (exit 2), no such device exit 3."""
    from .runtime import Device, NoDeviceError
    from .runtime import emu
    try:
        return Device(spec)
    except ValueError as e:
        raise click.UsageError(f"--device: {e}") from None
    except NoDeviceError as e:
        hint = ""
        if spec is None and emu.library_path().is_file():
            hint = "; the gfx950 emulator is built here: pass --device emu:gfx950 to run the gfx950 kernels on the CPU"
        click.echo(f"Error: {e}{hint}", err=True)
        sys.exit(NO_GPU_EXIT)


def _check_kernel(kernel, dev, heads, dims, accumulation) -> dict:
    """--kernel and --accumulation as planner tunables, refused (exit 2) before anything runs if the planner
    would refuse them for some (H, D) asked for."""
    from .ops import target_of
    from .plan import plan_prefill
    tunables = {"accumulation": accumulation} | ({"kernel": kernel} if kernel else {})
    for H in heads:
        for D in dims:
            try:
                plan_prefill(1, 1, H, D, target_of(dev), **tunables)
            except ValueError as e:
                raise click.UsageError(f"--kernel {kernel} at H={H}, D={D}: {e}" if kernel else str(e)) from None
    return tunables


@check.command("prefill")
@device_option
@click.option("--quick", is_flag=True, help="Small shapes only (CI size).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--heads", type=IntList(), default="32,64,16", show_default=True, help="Head counts H.")
@click.option("--dims", type=IntList(), default="64,128", show_default=True, help="Head dimensions D.")
@click.option("--shapes", type=Shapes(), default=None,
              help="MxN,... (default: the full sweep's fourteen shapes, or --quick's five).")
@reruns_option
@kernel_option
@accumulation_option
@fail_fast_option
@json_option
@verbose_option
def check_prefill(device_spec, quick, seed, heads, dims, shapes, reruns, kernel, accumulation, fail_fast, as_json,
                  verbose) -> None:
    """fp8_mqa_logits on a device against the reference, every window mode, both clean_logits."""
    from .check.sweep import bitwise_reruns, prefill_device_case, prefill_device_cases
    dev = _device_or_exit(device_spec)
    forced = _check_kernel(kernel, dev, heads, dims, accumulation)
    _progress(f"device {dev!r}")
    rng = np.random.default_rng(seed)
    cases = list(prefill_device_cases(quick, heads, dims, shapes))
    outcomes = _run_cases(cases, lambda c: prefill_device_case(rng, dev, *c, **forced), fail_fast)
    if reruns and not quick and not (fail_fast and _failed(outcomes)):
        _progress(f"bitwise reruns of one large case: {reruns}")
        outcomes.append(bitwise_reruns(rng, dev, runs=reruns, **forced))
    _report(outcomes, as_json, verbose)


@check.command("decode")
@device_option
@click.option("--quick", is_flag=True, help="Every case small (CI size, the emulator).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the design and of the random inputs.")
@click.option("--cases", "max_cases", type=click.IntRange(min=1), default=None,
              help="Cap the sampled design at this many cases (default: --quick until every pair is covered, "
                   "the full sweep at its own cap).")
@click.option("--max-context", type=click.IntRange(min=1), default=None,
              help="Leave out context values above this.")
@click.option("--heads", type=IntList(), default=None,
              help="Only these head counts H (default: the design's, or those a forced kernel serves).")
@click.option("--dims", type=IntList(), default=None,
              help="Only these head dimensions D (default: the design's, or those a forced kernel serves).")
@click.option("--block-sizes", type=IntList(), default=None,
              help="Only these block sizes (default: the design's, or those a forced kernel serves).")
@reruns_option
@kernel_option
@accumulation_option
@fail_fast_option
@json_option
@verbose_option
def check_decode(device_spec, quick, seed, max_cases, max_context, heads, dims, block_sizes, reruns, kernel,
                 accumulation, fail_fast, as_json, verbose) -> None:
    """fp8_paged_mqa_logits on a device against the reference: a seeded sample of the decode matrix (printed
    first), the two cache layouts, untrusted device values, [B, next_n] lengths, a batch dealt whole (kernels
    that deal their work); without --quick also bitwise reruns and caches past 4 GiB. A forced kernel that serves
    fixed shapes restricts the matrix to them."""
    from .check import sweep
    dev = _device_or_exit(device_spec)
    heads, dims, block_sizes = _decode_filters(kernel, heads, dims, block_sizes)
    _check_decode_kernel(kernel, dev, accumulation, heads, dims, block_sizes)
    _progress(f"device {dev!r}")
    design = sweep.decode_design(quick, seed, max_cases, max_context, heads, dims, block_sizes)
    rng = np.random.default_rng(seed)
    forced = {"kernel": kernel} if kernel else {}
    within = dict(heads=heads, dims=dims, block_sizes=block_sizes)
    # The fixed checks after the sampled design, each one case of the report.
    extra = [("layouts agree", lambda: sweep.decode_layouts_agree(rng, dev, accumulation=accumulation, **within,
                                                                   **forced))]
    for H, D, bs in sweep.UNTRUSTED_SHAPES:  # each kernel family the planner (or --kernel) runs at these shapes
        if all(f is None or v in f for v, f in ((H, heads), (D, dims), (bs, block_sizes))) and \
                _decode_serves(kernel, H, D, bs):
            for per_row in (False, True):  # both forms of context_lens
                extra.append(("untrusted values", lambda H=H, D=D, bs=bs, per_row=per_row:
                              sweep.decode_untrusted_values(rng, dev, accumulation=accumulation, heads=(H,), dims=(D,),
                                                            block_sizes=(bs,), lens_per_row=per_row, **forced)))
            extra.append(("lengths per row", lambda H=H, D=D, bs=bs: sweep.decode_lengths_per_row(
                rng, dev, accumulation=accumulation, heads=(H,), dims=(D,), block_sizes=(bs,), **forced)))
    extra.append(("dealt tail", lambda: sweep.decode_dealt_tail(rng, dev, accumulation=accumulation, **within,
                                                                 **forced)))
    if len(extra) == 2:  # the filters are past every listed shape
        extra.append(("untrusted values", lambda: sweep.decode_untrusted_values(rng, dev, accumulation=accumulation,
                                                                                **within, **forced)))
        extra.append(("lengths per row", lambda: sweep.decode_lengths_per_row(rng, dev, accumulation=accumulation,
                                                                              **within, **forced)))
    if not quick:
        if reruns:
            extra.append(("bitwise reruns", lambda: sweep.decode_bitwise_reruns(
                rng, dev, runs=reruns, accumulation=accumulation, **within, **forced)))
        for bs, base in sweep.OFFSET_CASES:
            extra.append(("caches past 4 GiB", lambda bs=bs, base=base: sweep.decode_offset_case(
                rng, dev, bs, base, accumulation=accumulation, **within, **forced)))
    kinds = {}
    for name, _ in extra:
        kinds[name] = kinds.get(name, 0) + 1
    _progress(f"sample: {len(design.cases)} cases covering {design.covered} of {design.items} value pairs "
              f"(seed {seed}); not coverable within the size cap: {len(design.infeasible)}; left out by the "
              f"case cap: {len(design.uncovered)}; then {len(extra)} fixed cases beyond the sample ("
              + ", ".join(f"{name} {n}" for name, n in kinds.items())
              + f"): {len(design.cases) + len(extra)} cases in all")
    names = list(sweep.DECODE_AXES)
    _progress(_table([[c[a] for a in names] for c in design.cases], names))
    cases = [sweep.decode_case_of(c) for c in design.cases]
    outcomes = _run_cases(cases, lambda c: sweep.decode_device_case(rng, dev, c[0], c[1], accumulation, **forced),
                          fail_fast)
    for i, (name, check) in enumerate(extra):
        if fail_fast and _failed(outcomes):
            break
        _progress(f"fixed case {i + 1}/{len(extra)}: {name}")
        outcomes.append(check())
    _report(outcomes, as_json, verbose)


@check.command("topk")
@device_option
@click.option("--quick", is_flag=True, help="Every case small (CI size, the emulator).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the design and of the random inputs.")
@click.option("--cases", "max_cases", type=click.IntRange(min=1), default=None,
              help="Cap the sampled design at this many cases (default: --quick until every pair is covered, "
                   "the full sweep at its own cap).")
@click.option("--op", type=click.Choice(["decode", "prefill"]), default="decode", show_default=True,
              help="decode: fp8_paged_mqa_topk; prefill: fp8_mqa_topk.")
@accumulation_option
@fail_fast_option
@json_option
@verbose_option
def check_topk(device_spec, quick, seed, max_cases, op, accumulation, fail_fast, as_json, verbose) -> None:
    """A top-k op on a device against the reference under the top-k gate: a seeded sample of its matrix (printed
    first). Decode (fp8_paged_mqa_topk): each case with rows of at least 4 top_k keys, fewer than top_k and none,
    in one key chunk or several. Prefill (fp8_mqa_topk): every window mode, rows of at least 4 top_k keys (and of
    none in the empty modes), the planned workspace or small groups of rows and key chunks."""
    from .check import topk
    dev = _device_or_exit(device_spec)
    _progress(f"device {dev!r}")
    if op == "prefill":
        design = topk.prefill_topk_design(quick, seed, max_cases)
        axes, run = topk.PREFILL_TOPK_AXES, topk.prefill_topk_device_case
    else:
        _check_decode_kernel(None, dev, accumulation)
        design = topk.topk_design(quick, seed, max_cases)
        axes, run = topk.TOPK_AXES, topk.topk_device_case
    _progress(f"sample: {len(design.cases)} cases covering {design.covered} of {design.items} value pairs "
              f"(seed {seed}); not coverable within the size cap: {len(design.infeasible)}; left out by the "
              f"case cap: {len(design.uncovered)}")
    names = list(axes)
    _progress(_table([[c[a] for a in names] for c in design.cases], names))
    rng = np.random.default_rng(seed)
    _report(_run_cases(design.cases, lambda c: run(rng, dev, c, accumulation), fail_fast), as_json, verbose)


@check.command("cache")
@device_option
@click.option("--quick", is_flag=True, help="Small sizes (CI size, the emulator).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the random inputs.")
@fail_fast_option
@json_option
@verbose_option
def check_cache(device_spec, quick, seed, fail_fast, as_json, verbose) -> None:
    """quantize_and_cache_keys, gather_cached_keys and packed_prefill_windows on a device against the numpy
    helpers of hipindexer.cache, bit for bit: every input type, both layouts, block sizes 1, 16 and 64, the
    rounding boundaries, and untrusted device values."""
    from .check.cache import cache_cases
    dev = _device_or_exit(device_spec)
    _progress(f"device {dev!r}")
    rng = np.random.default_rng(seed)
    _report(_run_cases(list(cache_cases(quick)), lambda c: c(rng, dev), fail_fast), as_json, verbose)


def _decode_filters(kernel, heads, dims, block_sizes):
    """The axis filters of check decode: as given, else what a forced kernel serves (None: the whole axis)."""
    from .plan.decode import DECODE
    facts = DECODE.by_key[kernel].kernel if kernel in DECODE.by_key else None  # its catalog entry
    if facts is not None and facts.fits:
        heads = heads or tuple(sorted({h for h, _ in facts.fits}))
        dims = dims or tuple(sorted({d for _, d in facts.fits}))
    if facts is not None and facts.block_sizes:
        block_sizes = block_sizes or tuple(facts.block_sizes)
    return heads, dims, block_sizes


def _check_decode_kernel(kernel, dev, accumulation, heads=None, dims=None, block_sizes=None) -> None:
    """--kernel and --accumulation refused (exit 2) before anything runs if the decode planner refuses them
    at a shape within the filters."""
    from .ops import target_of
    from .plan import plan_decode
    H, D, bs = (heads or (16,))[0], (dims or (64,))[0], (block_sizes or (16,))[0]
    try:
        plan_decode(1, 1, H, D, bs, 16, target_of(dev), accumulation=accumulation,
                    **({"kernel": kernel} if kernel else {}))
    except ValueError as e:
        raise click.UsageError(f"--kernel {kernel}: {e}" if kernel else str(e)) from None


def _decode_serves(kernel, H, D, block_size) -> bool:
    """Does the forced kernel (any kernel when none is forced) serve this decode shape?"""
    if not kernel:
        return True
    from .plan.decode import DECODE
    return DECODE.by_key[kernel].serves(H, D, block_size, False)


def _source_checkout(*needs: str):
    """The source checkout this package runs from: the folder above the package's, when it holds hsaco_src/
    and `needs` (build.py, tools/); None where it does not (an installed wheel carries none of them)."""
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    return root if all((root / p).exists() for p in ("hsaco_src", *needs)) else None


def _build_script():
    """The checkout's build.py, loaded by path: it imports without numpy or this package (a wheel build runs
    it in an isolated environment), so it is a script, not a module of either; None without a checkout."""
    import importlib.util
    root = _source_checkout("build.py")
    if root is None:
        return None
    name = "_hx_build"
    spec = importlib.util.spec_from_file_location(name, root / "build.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up while defining
    spec.loader.exec_module(mod)
    return mod


def _checkout_tools():
    """tools.support's isa_report and roofline, imported from the source checkout (its root put on sys.path)."""
    from pathlib import Path
    root = _source_checkout("tools")
    if root is None:
        raise click.ClickException(
            "hipindexer info --isa needs a source checkout: it recompiles each gfx950 kernel from hsaco_src/ with "
            "clang -S and reads the assembly with tools/support/isa_report.py, and a wheel carries neither (this "
            f"package runs from {Path(__file__).resolve().parent}, with no hsaco_src/ and tools/ beside it)")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        from tools.support import isa_report
    except ImportError as e:
        raise click.ClickException(f"hipindexer info --isa: no tools.support from the checkout at {root}: {e}")
    return isa_report


@main.command(context_settings={"ignore_unknown_options": True, "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def build(args) -> None:
    """Compile the kernel sources into code objects (build.py; --help for its options)."""
    mod = _build_script()
    if mod is None:
        raise click.ClickException("hipindexer build needs a source checkout (build.py and hsaco_src/); "
                                   "an installed wheel already carries its code objects")
    sys.exit(mod.main(list(args)))


def _toolchains() -> dict:
    """target -> {mode, path, version[, ptxas, ptxas_version]} or {missing: why}; {note} without a checkout."""
    mod = _build_script()
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
    isa_report = _checkout_tools()  # and a gfx950 compiler: each kernel is recompiled with -S
    from .runtime.module import DEFAULT_MANIFEST
    reports = isa_report.manifest_reports(DEFAULT_MANIFEST)
    if as_json:
        click.echo(json.dumps([isa_report.as_dict(r) for r in reports], indent=1))
    else:
        click.echo(isa_report.format_report(reports))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--isa", is_flag=True, help="gfx950 ISA report instead: resources and each kernel's hot loop "
                                          "(instruction mix, MFMA and VALU cycles per tile; "
                                          "tools/support/isa_report.py; needs a source checkout).")
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


def _today() -> str:
    import datetime
    return datetime.date.today().isoformat()


def _driver(dev) -> str | None:
    """The driver's version as the backend reports it (CUDA: 12080 is 12.8)."""
    try:
        v = dev._b.runtime_version()
    except Exception:  # a backend without the call is still benchmarkable
        return None
    return f"{v // 1000}.{v % 1000 // 10}" if dev.backend == "cuda" else str(v)


@main.group()
def bench() -> None:
    """Benchmarks (device time by events, host time per call, ceilings measured on the same run)."""


EMULATED_NOTE = "EMULATED: these times measure the CPU emulator running the gfx950 code, not a GPU: not speeds"


def _bench_report(op: str, dev, ceilings: dict, ceiling_lines: list[str], rows: list[dict], table: list[list],
                  header: list[str], as_json: bool) -> None:
    """One bench command's output: JSON (the run's date, device, driver, ceilings and rows), or the ceilings
    and a table; an emulated run says first that its times are not speeds."""
    from .bench.timing import emulated
    note = EMULATED_NOTE if emulated(dev) else None
    if as_json:
        click.echo(json.dumps({"op": op, "date": _today(), "device": repr(dev), "driver": _driver(dev),
                               "emulated": emulated(dev), "note": note, **ceilings, "cases": rows}, indent=1))
        return
    for line in ([note] if note else []) + ceiling_lines:
        click.echo(line)
    click.echo(_table(table, header))


def _pct(x) -> str:
    return f"{100 * x:.1f}%" if x is not None else "-"


@bench.command("prefill")
@device_option
@click.option("--shapes", type=Shapes(), default=None,
              help="MxN,... (default: (4096, 32768), (2048, 65536), (1024, 131072), (8192, 8192), (128, 32768); "
                   "tiny ones on the emulator)")
@click.option("--heads", type=IntList(), default="64,32", show_default=True, help="Head counts H.")
@click.option("--dim", type=click.IntRange(min=16), default=128, show_default=True, help="Head dimension D.")
@click.option("--clean", type=click.Choice(["true", "false", "both"]), default="both", show_default=True,
              help="clean_logits of the timed calls.")
@click.option("--repeats", type=click.IntRange(min=1), default=10, show_default=True,
              help="Timed batches; the median is reported.")
@kernel_option
@click.option("--split", type=click.IntRange(min=1), default=None,
              help="Force the key split of every row (default: the planner's choice): what a split costs.")
@accumulation_option
@json_option
def bench_prefill_cmd(device_spec, shapes, heads, dim, clean, repeats, kernel, split, accumulation, as_json) -> None:
    """fp8_mqa_logits, causal single request, against the bandwidth and matrix-rate ceilings this run
    measures (docs/benchmarks.md)."""
    from .bench.prefill import EMULATOR_SHAPES, PREFILL_BENCH_SHAPES, bench_prefill
    from .bench.timing import copy_bandwidth, emulated, figure, matrix_peak
    from .ops import target_of
    from .plan import plan_prefill
    dev = _device_or_exit(device_spec)
    tunables = _check_kernel(kernel, dev, heads, (dim,), accumulation)
    if emulated(dev):
        _progress("emulated device: tiny shapes unless --shapes, and the times measure the CPU emulator: they are "
                  "not speeds")
    shp = shapes or (EMULATOR_SHAPES if emulated(dev) else PREFILL_BENCH_SHAPES)
    if split:
        tunables["split"] = split
        for (M, N) in shp:
            for H in heads:
                try:
                    plan_prefill(M, N, H, dim, target_of(dev), **tunables)
                except ValueError as e:
                    raise click.UsageError(f"--split {split} at M={M}, N={N}, H={H}: {e}") from None
    cleans = {"true": [True], "false": [False], "both": [True, False]}[clean]
    _progress(f"device {dev!r}: measuring the copy ceiling")
    bw = copy_bandwidth(dev)
    _progress("measuring the matrix-rate ceiling")
    peak = matrix_peak(dev)
    rows = []
    todo = [(M, N, H, cl) for (M, N) in shp for H in heads for cl in cleans]
    for i, (M, N, H, cl) in enumerate(todo):
        _progress(f"[{i + 1}/{len(todo)}] M={M} N={N} H={H} clean={cl}")
        r = bench_prefill(dev, M, N, H, dim, cl, repeats, **tunables)
        r["of_matrix_peak"] = r["tflops"] * 1e12 / peak if peak else None
        r["GBps"] = r["bytes"] / (r["us"] * 1e-6) / 1e9
        r["of_copy"] = r["GBps"] * 1e9 / bw
        rows.append(r)
        _progress(f"  {r['us']:.1f} us, {figure(r['tflops'], '.1f')} TFLOP/s, {figure(r['GBps'])} GB/s, "
                  f"host {r['host_us']:.1f} us/call")
    _bench_report("prefill", dev, {"copy_GBps": bw / 1e9, "matrix_peak_TFLOPs": peak / 1e12 if peak else None},
                  [f"bandwidth ceiling (our copy kernel, read + write): {figure(bw / 1e9)} GB/s",
                   "matrix-rate ceiling (our fp8 peak loop): " +
                   (f"{figure(peak / 1e12)} TFLOP/s" if peak else "none for this target")], rows,
                  [[r["M"], r["N"], r["H"], r["clean"], r["kernel"], f"{r['us']:.1f}", figure(r["tflops"], ".1f"),
                    _pct(r["of_matrix_peak"]), figure(r["GBps"]), _pct(r["of_copy"]), f"{r['host_us']:.1f}"]
                   for r in rows],
                  ["M", "N", "H", "clean", "kernel", "median us", "TFLOP/s", "of matrix peak", "GB/s", "of copy",
                   "host us/call"], as_json)


@bench.command("decode")
@device_option
@click.option("--rows", type=DecodeRows(), default=None,
              help="SPREAD:BxCTX,... with SPREAD equal, pm30 or one_long (default: the eight rows of docs/benchmarks.md; tiny "
                   "ones on the emulator)")
@click.option("--heads", type=IntList(), default="64,32", show_default=True, help="Head counts H.")
@click.option("--next-n", "next_ns", type=NextNs(), default="1,2,4,6,8,ragged", show_default=True,
              help="next_n values; ragged = next_n 8 with half the rows live")
@click.option("--clean", type=click.Choice(["true", "false", "both"]), default="both", show_default=True)
@click.option("--repeats", type=click.IntRange(min=1), default=10, show_default=True,
              help="Timed batches; the median is reported.")
@click.option("--block-size", type=click.Choice(["16", "64"]), default="64", show_default=True,
              help="Tokens per cache block.")
@click.option("--lens", type=click.Choice(["per-sequence", "per-row", "both"]), default="per-sequence",
              show_default=True, help="context_lens as [B] (+ next_n_lens), as [B, next_n] (DeepGEMM's form), or "
                                      "both, timed back to back.")
@click.option("--layout", type=click.Choice(["target", "block-flat", "preshuffled"]), default="target",
              show_default=True, help="The cache layout; target: preshuffled on gfx950, block-flat elsewhere.")
@click.option("--isolated", is_flag=True,
              help="Also time each row one call at a time after an L2 flush, the device idle between calls "
                   "(DeepGEMM's benchmark method): the \"isolated us\" column.")
@click.option("--deal", default=None, metavar="SHARE[:GRAIN]",
              help="The sm_90a kernel's dealt tail: SHARE 1024ths of the work, chunks of at least GRAIN block prices "
                   "(0 turns dealing off; default: the planner's).")
@kernel_option
@json_option
def bench_decode_cmd(device_spec, rows, heads, next_ns, clean, repeats, block_size, lens, layout, isolated, deal,
                     kernel, as_json) -> None:
    """fp8_paged_mqa_logits against the copy and read ceilings measured in the same run."""
    from .bench.decode import D, DECODE_BENCH_ROWS, EMULATOR_ROWS, LENS_FORMS, bench_decode_shape
    from .bench.timing import copy_bandwidth, emulated, figure, read_bandwidth
    dev = _device_or_exit(device_spec)
    block_size = int(block_size)
    _check_decode_kernel(kernel, dev, "fast", heads, (D,), (block_size,))
    tunables = {"kernel": kernel} if kernel else {}
    if deal is not None:
        from .plan.decode import deal_tunables
        try:
            tunables |= deal_tunables(deal)
        except ValueError:
            raise click.BadParameter(f"expected SHARE or SHARE:GRAIN (integers), got {deal!r}",
                                     param_hint="--deal") from None
    shapes = rows or (EMULATOR_ROWS if emulated(dev) else DECODE_BENCH_ROWS)
    cleans = {"true": [True], "false": [False], "both": [True, False]}[clean]
    _progress(f"device {dev!r}: measuring the copy and read ceilings")
    copy_bw, read_bw = copy_bandwidth(dev), read_bandwidth(dev)
    results = []
    for spread, B, ctx in shapes:
        results += bench_decode_shape(dev, spread, B, ctx, heads,
                                      next_ns, cleans, repeats, _progress, block_size=block_size,
                                      lens_forms=LENS_FORMS if lens == "both" else (lens,),
                                      preshuffle=None if layout == "target" else layout == "preshuffled",
                                      isolated=isolated, **tunables)
    for r in results:
        moved = r["key_bytes"] + r["logits_bytes"]
        r["of_read"] = moved / (r["us"] * 1e-6) / read_bw
        r["of_copy"] = moved / (r["us"] * 1e-6) / copy_bw
    _bench_report("decode", dev, {"copy_GBps": copy_bw / 1e9, "read_GBps": read_bw / 1e9},
                  [f"copy ceiling (read + write): {figure(copy_bw / 1e9)} GB/s; read ceiling (read only): "
                   f"{figure(read_bw / 1e9)} GB/s"], results,
                  [[r["spread"], r["B"], r["ctx"], r["H"], r["block_size"],
                    "preshuffled" if r["preshuffle"] else "block-flat", r["next_n"], r["clean"], r["lens"],
                    r["kernel"], r["units"], f"{r['us']:.1f}", f"{r['us_graph']:.1f}" if r["us_graph"] else "-",
                    f"{r['us_isolated']:.1f}" if r["us_isolated"] else "-", figure(r["GBps"]),
                    f"{r['logits_bytes'] / 1e6:.1f}", _pct(r["of_read"]), figure(r["tflops"], ".2f"),
                    f"{r['host_us']:.1f}"]
                   for r in results],
                  ["spread", "B", "ctx", "H", "bs", "layout", "next_n", "clean", "lens", "kernel", "units", "median us",
                   "graph us", "isolated us", "key GB/s", "logits MB", "of read", "TFLOP/s", "host us/call"], as_json)


@bench.command("topk")
@device_option
@click.option("--op", type=click.Choice(["decode", "prefill"]), default="decode", show_default=True,
              help="decode: fp8_paged_mqa_topk; prefill: fp8_mqa_topk.")
@click.option("--shapes", type=Shapes(), default=None,
              help="decode BxCTX,... (default: (64, 131072), (64, 32768), (16, 131072), (16, 32768), (4, 8192)); "
                   "prefill MxN,... (default: (4096, 32768), (2048, 65536), (1024, 131072), (128, 32768)); tiny "
                   "ones on the emulator")
@click.option("--heads", type=IntList(), default="64", show_default=True, help="Head counts H.")
@click.option("--next-n", "next_ns", type=IntList(), default="1,2", show_default=True,
              help="Decode query rows per sequence.")
@click.option("--top-k", "top_k", type=click.IntRange(1, 4096), default=2048, show_default=True)
@click.option("--repeats", type=click.IntRange(min=1), default=5, show_default=True,
              help="Timed batches; the median is reported.")
@json_option
def bench_topk_cmd(device_spec, op, shapes, heads, next_ns, top_k, repeats, as_json) -> None:
    """A top-k op against our logits op alone and our logits op followed by topk_logits, timed in one run, with
    the read ceiling measured in the same run (topk_logits' fraction of it) and its workspace beside the bound
    (docs/benchmarks.md, "Top-k"). tools/measure/prefill_topk_bench.py adds torch.topk beside them."""
    from .bench.timing import emulated, figure, read_bandwidth
    from .bench.topk import (DECODE_TOPK_ROWS, EMULATOR_DECODE_ROWS, EMULATOR_PREFILL_SHAPES, PREFILL_TOPK_SHAPES,
                             bench_topk_decode, bench_topk_prefill)
    dev = _device_or_exit(device_spec)
    if emulated(dev):
        _progress("emulated device: tiny shapes unless --shapes, and the times measure the CPU emulator: they are "
                  "not speeds")
    decode = op == "decode"
    shp = shapes or ((EMULATOR_DECODE_ROWS if decode else EMULATOR_PREFILL_SHAPES) if emulated(dev) else
                     (DECODE_TOPK_ROWS if decode else PREFILL_TOPK_SHAPES))
    _progress(f"device {dev!r}: measuring the read ceiling")
    bw = read_bandwidth(dev)
    todo = [(a, b, H, n) for (a, b) in shp for H in heads for n in (next_ns if decode else (0,))]
    rows = []
    for i, (a, b, H, n) in enumerate(todo):
        _progress(f"[{i + 1}/{len(todo)}] {'B' if decode else 'M'}={a} {'ctx' if decode else 'N'}={b} H={H}" +
                  (f" next_n={n}" if decode else ""))
        r = bench_topk_decode(dev, a, b, H, n, top_k, repeats) if decode else \
            bench_topk_prefill(dev, a, b, H, top_k, repeats)
        r["topk_logits_of_read"] = r["topk_logits_read_GBps"] * 1e9 / bw if r["topk_logits_read_GBps"] else None
        rows.append(r)
    shape = (lambda r: [r["B"], r["ctx"], r["H"], r["next_n"], r["path"]]) if decode else \
        (lambda r: [r["M"], r["N"], r["H"]])
    _bench_report(f"topk_{op}", dev, {"read_GBps": bw / 1e9},
                  [f"read ceiling (our streaming read kernel): {figure(bw / 1e9)} GB/s"], rows,
                  [shape(r) + [f"{r['us']:.1f}", f"{r['us_logits']:.1f}", f"{r['us_logits_then_topk_logits']:.1f}",
                               f"{r['over_logits']:.2f}", f"{r['over_logits_then_topk_logits']:.2f}",
                               figure(r["tflops"], ".1f"), _pct(r["topk_logits_of_read"]),
                               f"{r['workspace_bytes']} / {r['workspace_bound']}", f"{r['host_us']:.1f}"]
                   for r in rows],
                  (["B", "ctx", "H", "next_n", "path"] if decode else ["M", "N", "H"]) +
                  ["top-k us", "logits us", "logits + topk_logits us", "/ logits", "/ (logits + topk_logits)",
                   "TFLOP/s", "topk_logits of read", "workspace / bound B", "host us/call"], as_json)


@bench.command("cache")
@device_option
@click.option("--repeats", type=click.IntRange(min=1), default=10, show_default=True,
              help="Timed batches; the median is reported.")
@json_option
def bench_cache_cmd(device_spec, repeats, as_json) -> None:
    """quantize_and_cache_keys (65536 keys, and a decode step's 64) and gather_cached_keys (131072 tokens)
    against the copy ceiling measured in the same run (docs/benchmarks.md)."""
    from .bench.cache import bench_cache
    from .bench.timing import copy_bandwidth, emulated, figure
    dev = _device_or_exit(device_spec)
    if emulated(dev):
        _progress("emulated device: tiny sizes, and the times measure the CPU emulator: they are not speeds")
    _progress(f"device {dev!r}: measuring the copy ceiling")
    bw = copy_bandwidth(dev)
    rows = bench_cache(dev, repeats, _progress)
    for r in rows:
        r["of_copy"] = r["GBps"] * 1e9 / bw
    scale = {True: "pow2", False: "amax/448", None: "-"}
    _bench_report("cache", dev, {"copy_GBps": bw / 1e9},
                  [f"bandwidth ceiling (our copy kernel, read + write): {figure(bw / 1e9)} GB/s"], rows,
                  [[r["op"], "preshuffled" if r["preshuffle"] else "block-flat", scale[r["power_of_two"]],
                    r["tokens"], f"{r['us']:.2f}", f"{r['us_graph']:.2f}" if r["us_graph"] else "-",
                    figure(r["GBps"]), _pct(r["of_copy"]), f"{r['host_us']:.1f}"] for r in rows],
                  ["op", "layout", "scale", "tokens", "median us", "graph us", "GB/s", "of copy", "host us/call"],
                  as_json)


if __name__ == "__main__":
    main()
