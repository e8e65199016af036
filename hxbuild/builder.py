"""An incremental build: compile what is not current, keep what is, write each tree's manifest."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

from . import manifest
from .compile import SUFFIX, compile_job
from .hipindexer_modules import catalog
from .jobs import PARAMS_HEADER, plan
from .process import BuildError
from .toolchains import Toolchain, find_toolchain
from .trees import Tree, trees


def write_params_header(work: Path) -> str:
    """<work>/include/hx_params.h from the catalog, rewritten only when it changed; returns its text."""
    header = catalog.header_text()
    (work / "include").mkdir(parents=True, exist_ok=True)
    hpath = work / "include" / PARAMS_HEADER
    if not hpath.is_file() or hpath.read_text() != header:
        hpath.write_text(header)
    return header


def _summary(target: str, e: dict) -> str:
    r = e["resources"]
    res = (f"vgpr {r['vgpr']} agpr {r['agpr']} sgpr {r['sgpr']} lds {r['lds']} scratch {r['scratch']} "
           f"occupancy {r['occupancy']}" if target == "gfx950" else
           f"regs {r['registers']} smem {r['shared']} stack {r['stack']} spills {r['spill_stores']}/{r['spill_loads']}")
    return f"built, param_size {e['param_size']}, {res}"


def build(targets, src: Path, out: Path, work: Path, force=False, jobs=1, log=lambda msg: None) -> list[Path]:
    """Builds every catalog kernel for `targets` into its tree under `out` (trees.py); returns the manifests'
    paths. Raises BuildError (ToolchainError when a target has no compiler) naming every kernel that failed."""
    header = write_params_header(work)
    tcs = {t: find_toolchain(t, work) for t in targets}
    for t, tc in tcs.items():
        log(f"[{t}] {tc.mode}: {tc.path} ({tc.version})"
            + (f" + {tc.ptxas} ({tc.ptxas_version}, PTX ISA {tc.ptx_isa})" if tc.ptxas else ""))
    return [build_tree(tree, tcs, header, src, work, force, jobs, log) for tree in trees(out)]


def build_tree(tree: Tree, tcs: dict[str, Toolchain], header: str, src: Path, work: Path, force: bool, jobs: int,
               log) -> Path:
    out = tree.out
    old = manifest.read(out)
    old_entries = manifest.entries_by_key(old)
    results, todo = {}, []
    for job in plan(tree.kernels, tuple(tcs), src, header, {t: tc.mode for t, tc in tcs.items()}):
        e = old_entries.get((job.target, job.key))
        if not force and e is not None and manifest.is_current(e, job, tcs[job.target], out):
            results[(job.target, job.key)] = e
            log(f"[{job.target}] {job.key}: up to date")
        else:
            todo.append(job)

    errors = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futs = {pool.submit(compile_job, j, tcs[j.target], src, work, out): j for j in todo}
        for f in concurrent.futures.as_completed(futs):
            j = futs[f]
            try:
                e = f.result()
            except BuildError as err:
                errors.append(str(err))
                continue
            results[(j.target, j.key)] = e
            log(f"[{j.target}] {j.key}: {_summary(j.target, e)}")
    if errors:
        raise BuildError("\n".join(errors))

    new = manifest.assemble(tree.kernels, results, old, tuple(tcs), tcs)
    mpath = manifest.write(out, new)
    _remove_unlisted_objects(out, tuple(tcs), new)
    log(f"wrote {mpath} ({len(new['kernels'])} kernels)")
    return mpath


def _remove_unlisted_objects(out: Path, targets, new: dict) -> None:
    """Objects of the built targets that the manifest no longer lists (a kernel left the catalog or moved to
    the other tree) go: a wheel packs every object in <out>/<target>/."""
    listed = {out / e["object"] for e in new["kernels"]}
    for t in targets:
        for obj in (out / t).glob(f"*.{SUFFIX[t]}"):
            if obj not in listed:
                obj.unlink()
