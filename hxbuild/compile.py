"""Run one job: compile, read the object's resources, check its param struct against the catalog.

The object is written in place only once every check passed, so a failed
build never leaves a half-described object behind.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

from .hipindexer_modules import catalog
from .jobs import Job, expand
from .process import BuildError, run
from .resources import amd_resources, cuda_resources
from .toolchains import Toolchain

SUFFIX = {"gfx950": "hsaco", "sm_90a": "cubin"}


def relabel_ptx(text: str, isa: str) -> str:
    """PTX with its .version set to `isa`: a newer nvcc's PTX for an older ptxas, which rejects
    any instruction its ISA lacks."""
    return re.sub(r"^\.version \d+\.\d+", f".version {isa}", text, count=1, flags=re.M)


def _compile(job: Job, tc: Toolchain, flags: list[str], tmp: Path, obj: Path, env: dict) -> str:
    """Writes the object to `obj`; returns what the resources are read from (gfx950: the -S listing,
    sm_90a: the ptxas -v log)."""
    if job.target == "gfx950":
        p = run(tc.argv + flags + [str(job.source), "-o", str(obj)], env)
        q = run(tc.argv + flags + ["-S", str(job.source), "-o", str(tmp / "k.s")], env) if p.returncode == 0 else p
        if p.returncode or q.returncode:
            raise BuildError(f"[gfx950] {job.key}: compile failed:\n{p.stderr or q.stderr}")
        return (tmp / "k.s").read_text()
    if tc.mode == "nvcc+ptxas":
        cut = flags.index("|")
        ptx = tmp / "k.ptx"
        p = run(tc.argv + flags[:cut] + [str(job.source), "-o", str(ptx)], env)
        if p.returncode:
            raise BuildError(f"[sm_90a] {job.key}: nvcc failed:\n{p.stderr}")
        ptx.write_text(relabel_ptx(ptx.read_text(), tc.ptx_isa))
        q = run([tc.ptxas] + flags[cut + 2:] + [str(ptx), "-o", str(obj)], env)
        if q.returncode:
            raise BuildError(f"[sm_90a] {job.key}: ptxas failed:\n{q.stderr}")
        return q.stdout + q.stderr
    p = run(tc.argv + flags + [str(job.source), "-o", str(obj)], env)
    if p.returncode:
        raise BuildError(f"[sm_90a] {job.key}: nvcc failed:\n{p.stderr}")
    return p.stdout + p.stderr


def compile_job(job: Job, tc: Toolchain, src: Path, work: Path, out: Path) -> dict:
    """Builds <out>/<target>/<key>.<suffix> and returns its manifest entry."""
    k = job.kernel
    obj_path = out / job.target / f"{job.key}.{SUFFIX[job.target]}"
    obj_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **tc.env}
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        tmp_obj = Path(tmp) / obj_path.name
        report = _compile(job, tc, expand(job.flags, src, work), Path(tmp), tmp_obj, env)
        data = tmp_obj.read_bytes()
        if job.target == "gfx950":
            param_size, res = amd_resources(data, report, k.symbol, k.block_for(job.target))
        else:
            param_size, res = cuda_resources(data, report, k.symbol)
        want = catalog.STRUCT[k.params].size
        if param_size != want:
            raise BuildError(
                f"[{job.target}] {job.key}: code object says {k.params} is {param_size} bytes, "
                f"catalog mirror says {want}"
            )
        os.replace(tmp_obj, obj_path)
    two = tc.mode == "nvcc+ptxas"
    return {
        "name": k.key,
        "symbol": k.symbol,
        "target": job.target,
        "variant": dict(job.variant),
        "variant_key": job.key,
        "object": f"{job.target}/{obj_path.name}",
        "sha256": hashlib.sha256(data).hexdigest(),
        "source": k.source,
        "source_hash": job.shash,
        "compiler": f"{tc.path} | {tc.ptxas}" if two else tc.path,
        "compiler_version": f"{tc.version} | ptxas {tc.ptxas_version}" if two else tc.version,
        "toolchain_mode": tc.mode,
        "flags": job.flags,
        "params": k.params,
        "param_size": param_size,
        "block": k.block_for(job.target),
        "dynamic_smem": k.smem_for(job.target),
        "resources": res,
    }
