"""manifest.json: what was built, with what, and from which sources; when an entry is still current.

An entry is current when its source hash, flags and toolchain are unchanged
and its object is on disk with the recorded sha256; anything else is rebuilt
(build) or reported as stale (check).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from .hipindexer_modules import catalog
from .jobs import Job, plan
from .toolchains import TARGETS, Toolchain
from .trees import Tree

SCHEMA = 1
NAME = "manifest.json"


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read(out: Path) -> dict:
    """<out>/manifest.json, or {} when there is none."""
    path = out / NAME
    return json.loads(path.read_text()) if path.is_file() else {}


def entries_by_key(manifest: dict) -> dict:
    return {(e["target"], e["variant_key"]): e for e in manifest.get("kernels", [])}


def is_current(entry: dict, job: Job, tc: Toolchain, out: Path) -> bool:
    obj = out / entry["object"]
    same_tc = entry.get("toolchain_mode") == tc.mode and entry["compiler_version"].startswith(tc.version)
    return (entry["source_hash"] == job.shash and entry["flags"] == job.flags and same_tc and obj.is_file()
            and sha256_of(obj) == entry["sha256"])


def check(tree: Tree, src: Path, targets) -> list[str]:
    """Stale or missing kernels of `tree`, by name; empty when everything is current. Compiles nothing."""
    out = tree.out
    mpath = out / NAME
    if not mpath.is_file():
        return [f"{mpath} is missing: run build.py"]
    manifest = json.loads(mpath.read_text())
    header = catalog.header_text()
    problems = []
    have = entries_by_key(manifest)
    wanted = set()
    for t in targets:
        mode = manifest.get("toolchains", {}).get(t, {}).get("mode", "clang" if t == "gfx950" else "nvcc")
        for job in plan(tree.kernels, [t], src, header, {t: mode}):
            wanted.add((t, job.key))
            e = have.get((t, job.key))
            if e is None:
                problems.append(f"[{t}] {job.key}: not in the manifest")
                continue
            obj = out / e["object"]
            if not obj.is_file():
                problems.append(f"[{t}] {job.key}: object {obj} is missing")
            elif sha256_of(obj) != e["sha256"]:
                problems.append(f"[{t}] {job.key}: object {obj} does not match its sha256")
            if e["source_hash"] != job.shash:
                problems.append(f"[{t}] {job.key}: sources, params header or flags changed since it was built ({e['source']})")
    for (t, key) in have:
        if t in targets and (t, key) not in wanted:
            problems.append(f"[{t}] {key}: in {mpath} but the catalog does not put it there")
    return problems


def assemble(kernels, results: dict, old: dict, targets, toolchains: dict) -> dict:
    """The new manifest of a tree holding `kernels`: this build's entries, plus the old ones of targets not
    built this time that are still among `kernels`; entries in catalog order."""
    results = dict(results)
    known = {(t, catalog.variant_key(k, v)) for k in kernels for t in k.targets for v in k.variants}
    for key, e in entries_by_key(old).items():
        if key[0] not in targets and key in known:
            results.setdefault(key, e)
    tcs = {t: v for t, v in old.get("toolchains", {}).items() if t not in targets}
    tcs.update({t: tc.describe() for t, tc in toolchains.items()})
    order = {(t, catalog.variant_key(k, v)): i
             for i, (k, t, v) in enumerate((k, t, v) for k in kernels for t in TARGETS for v in k.variants)}
    return {
        "schema": SCHEMA,
        "kernels": sorted(results.values(), key=lambda e: order.get((e["target"], e["variant_key"]), 1 << 30)),
        "toolchains": tcs,
        "driver_floor": " ".join(tcs[t]["driver_floor"] for t in TARGETS if t in tcs),
    }


def write(out: Path, manifest: dict) -> Path:
    """Replaces <out>/manifest.json in one step: a reader never sees half a file."""
    out.mkdir(parents=True, exist_ok=True)
    mpath = out / NAME
    tmp = mpath.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(tmp, mpath)
    return mpath
