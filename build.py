#!/usr/bin/env python3
"""Compile every catalog kernel x target x variant into code objects + manifest.

    python build.py [--target gfx950|sm_90a|emu-gfx950 ...] [--no-emu | --emu-only [--emu-kernels KEY,...]]
                    [--check] [--force]
                    [-j N] [--quiet] [--src DIR] [--out DIR] [--work DIR]

Objects land in <out>/<target>/<variant_key>.<hsaco|cubin> (default out:
hipindexer/kernels), described by <out>/manifest.json; the kernels the
catalog marks test_only go to <out>/test-only/ with a manifest of their own,
so a wheel never carries them. Incremental: an
object is rebuilt only when its source_hash, flags or compiler changed or the
file is missing / differs from its recorded sha256. --check compiles nothing:
it verifies the manifest against the objects and the sources and exits 1
naming every stale kernel. --emu-only builds only the emulated twins, over the
gfx950 objects already in <out> (tools/support/mutate.py's planted trees,
whose gfx950 objects are never run); --emu-kernels narrows that to some kernels' twins, and the emulator then
loads no other. The work lives in hxbuild/ (its __init__
maps the modules). Stdlib only, plus msgpack for the AMDGPU metadata.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:  # `hipindexer build` and the tests load this file by path
    sys.path.insert(0, str(ROOT))

from hxbuild import emu as emubuild  # noqa: E402
from hxbuild import manifest  # noqa: E402
from hxbuild.builder import build, write_params_header  # noqa: E402
from hxbuild.process import BuildError, ToolchainError  # noqa: E402,F401
from hxbuild.toolchains import TARGETS, find_toolchain  # noqa: E402,F401
from hxbuild.trees import trees  # noqa: E402

EMU = emubuild.TARGET  # host emulation of the gfx950 objects: development and CI only, never in wheels


def _log(quiet: bool, msg: str) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def _gfx950_entries(out: Path) -> list[dict]:
    """The gfx950 kernels of every tree: the emulator runs the test-only ones too."""
    return [e for tree in trees(out) for e in json.loads((tree.out / manifest.NAME).read_text())["kernels"]
            if e["target"] == "gfx950"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="build.py", description=__doc__.splitlines()[0])
    ap.add_argument("--target", action="append", choices=TARGETS + (EMU,),
                    help=f"repeatable; default: all ({EMU} only where a host compiler is found; it needs gfx950)")
    ap.add_argument("--no-emu", action="store_true", help=f"leave {EMU} out of the default targets (wheel builds)")
    ap.add_argument("--emu-only", action="store_true",
                    help=f"build only {EMU}, from --src, over the gfx950 objects already in --out (planted trees)")
    ap.add_argument("--emu-kernels", default=None, metavar="KEY,...",
                    help=f"with --emu-only: the twins of these catalog keys alone; the emulator then loads no other "
                         f"kernel (a planted tree whose suite runs only these)")
    ap.add_argument("--check", action="store_true", help="verify manifest vs objects and sources; compile nothing")
    ap.add_argument("--force", action="store_true", help="rebuild everything")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--src", type=Path, default=ROOT / "hsaco_src")
    ap.add_argument("--out", type=Path, default=ROOT / "hipindexer" / "kernels")
    ap.add_argument("--work", type=Path, default=ROOT / "build", help="generated header, lld shim, temporaries")
    a = ap.parse_args(argv)
    emu = a.emu_only or (EMU in a.target if a.target else not a.no_emu and emubuild.available())
    targets = () if a.emu_only else tuple(t for t in TARGETS if t in (a.target or TARGETS) or (emu and t == "gfx950"))
    src, out, work = a.src.resolve(), a.out.resolve(), a.work.resolve()
    log = lambda msg: _log(a.quiet, msg)  # noqa: E731
    if a.emu_only and not (out / manifest.NAME).is_file():
        ap.error(f"--emu-only builds over the gfx950 objects of a build, and {out} has none")
    if a.emu_kernels is not None and not a.emu_only:
        ap.error("--emu-kernels goes with --emu-only")
    only = None if a.emu_kernels is None else set(a.emu_kernels.split(","))

    try:
        if a.check:
            problems = [p for tree in trees(out) for p in manifest.check(tree, src, targets)]
            if emu and not problems:
                problems = emubuild.check_target(out, _gfx950_entries(out), src)
            for p in problems:
                print(f"stale: {p}", file=sys.stderr)
            if not problems:
                log(f"every manifest under {out} is current")
            return 1 if problems else 0
        if targets:
            build(targets, src, out, work, force=a.force, jobs=a.jobs, log=log)
        else:  # --emu-only: the twins still include the generated params header
            write_params_header(work)
        if emu:
            entries = [e for e in _gfx950_entries(out) if only is None or e["name"] in only]
            unbuilt = sorted((only or set()) - {e["name"] for e in entries})
            if unbuilt:
                ap.error(f"--emu-kernels: no gfx950 build of {unbuilt} in {out}")
            emubuild.build_target(out, src, work, entries, a.jobs, log, a.force)
        return 0
    except (BuildError, emubuild.EmuBuildError) as e:
        print(f"build.py: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
