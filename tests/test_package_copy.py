"""tools/support/package_copy.py: how harnesses point the CLI and the tests at another kernel build, now that the
runtime takes no environment variable for it."""
import json
import os
import subprocess
import sys
from pathlib import Path

from tools.support.package_copy import PackageCopy

ROOT = Path(__file__).resolve().parents[1]


def test_the_runtime_takes_its_kernels_from_its_own_folder_whatever_the_environment(tmp_path):
    probe = "from hipindexer.runtime import emu, module; print(module.DEFAULT_MANIFEST); print(emu.library_path())"
    env = {"PYTHONPATH": str(ROOT), "HIPINDEXER_KERNELS": str(tmp_path), "HX_EMU_ROOT": str(tmp_path)}
    p = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env={**os.environ, **env},
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    manifest, emu_lib = p.stdout.split()
    assert Path(manifest) == ROOT / "hipindexer" / "kernels" / "manifest.json"
    assert Path(emu_lib) == ROOT / "hipindexer" / "kernels" / "emu-gfx950" / "lib" / "libamdhip64.so"


def test_no_kernel_override_in_the_shipped_package():
    hits = [f"{f.relative_to(ROOT)}" for f in (ROOT / "hipindexer").rglob("*.py")
            if any(v in f.read_text() for v in ("HIPINDEXER_KERNELS", "HX_EMU_ROOT"))]
    assert not hits, hits


def test_the_cli_on_a_package_copy_sees_the_copy_s_build(tmp_path):
    pkg = PackageCopy(tmp_path / "pkg").refresh()
    assert not (pkg.kernels).exists() and (pkg.root / "hipindexer" / "cli.py").is_file()
    pkg.kernels.mkdir(parents=True)
    entry = {"name": "fill_u32", "symbol": "hx_fill_u32", "target": "gfx950", "variant": {}, "variant_key": "fill_u32",
             "object": "gfx950/fill_u32.hsaco", "params": "FillParams", "param_size": 24, "block": 256}
    (pkg.kernels / "manifest.json").write_text(json.dumps({"schema": 1, "kernels": [entry], "toolchains": {}}))
    p = pkg.run(["-m", "hipindexer.cli", "info", "--json"], timeout=300)
    assert p.returncode == 0, p.stderr
    m = json.loads(p.stdout)["manifest"]
    assert Path(m["path"]) == pkg.kernels / "manifest.json" and [k["name"] for k in m["kernels"]] == ["fill_u32"]
    # a refresh brings the package files up to date and keeps the copy's own build
    (pkg.root / "hipindexer" / "stale.py").write_text("")
    pkg.refresh()
    assert not (pkg.root / "hipindexer" / "stale.py").exists() and (pkg.kernels / "manifest.json").is_file()


def test_an_emulated_run_gets_one_blas_thread_unless_the_caller_chose(tmp_path, monkeypatch):
    pkg = PackageCopy(tmp_path / "pkg")
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    assert pkg.env(emulated=True)["OPENBLAS_NUM_THREADS"] == "1"
    assert "OPENBLAS_NUM_THREADS" not in pkg.env()  # a GPU suite's references keep every core
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    assert pkg.env(emulated=True)["OPENBLAS_NUM_THREADS"] == "3"
