"""build.py end to end: both targets into a temp dir (seeded with the
checkout's objects, one kernel a target compiled fresh), manifest contents,
resources cross-checks, --check staleness, missing toolchains; and the hxbuild
modules behind it."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from by_path import load as _load

ROOT = Path(__file__).resolve().parents[1]


build = _load("_hx_build_test", ROOT / "build.py")  # puts the checkout on sys.path for hxbuild
from hxbuild import builder, resources, toolchains  # noqa: E402
from hxbuild.hipindexer_modules import catalog, codeobj  # noqa: E402


def _have(target):
    try:
        build.find_toolchain(target, Path("/tmp/hx-probe-work"))
        return True
    except build.ToolchainError:
        return False


TARGETS = [t for t in build.TARGETS if _have(t)]
pytestmark = pytest.mark.toolchain


FRESH = "fill_u32"  # the kernel the seeded build compiles for every target


def _seed(out: Path) -> None:
    """The checkout's objects and manifests (hipindexer/kernels, shipped and test-only trees), where it has them,
    copied into `out` but FRESH's objects: the build keeps what is current there (source, flags, toolchain and
    sha256 as recorded: anything stale is compiled) and compiles FRESH for every target, where a whole build would
    repeat what `python build.py` has just done (CI's step before the tests)."""
    kernels = ROOT / "hipindexer" / "kernels"
    for tree in ("", "test-only"):
        src = kernels / tree / "manifest.json"
        if not src.is_file():
            continue
        for e in json.loads(src.read_text())["kernels"]:
            obj = kernels / tree / e["object"]
            if e["name"] != FRESH and obj.is_file():
                (out / tree / e["object"]).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(obj, out / tree / e["object"])
        (out / tree).mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, out / tree / "manifest.json")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if not TARGETS:
        pytest.skip("no kernel toolchain")
    pytest.importorskip("msgpack")
    d = tmp_path_factory.mktemp("build")
    shutil.copytree(ROOT / "hsaco_src", d / "src")
    _seed(d / "out")
    args = ["--src", str(d / "src"), "--out", str(d / "out"), "--work", str(d / "work"), "-j", "2", "--quiet"]
    args += [a for t in TARGETS for a in ("--target", t)]
    assert build.main(args) == 0
    return d, args


def _manifest(d, tree=""):
    return json.loads((d / "out" / tree / "manifest.json").read_text())


def _entries(d):
    """(folder its object path is relative to, entry) of every kernel, shipped and test-only."""
    return [(d / "out" / tree, e) for tree in ("", "test-only") for e in _manifest(d, tree)["kernels"]]


def _keys(kernels):
    return {(t, catalog.variant_key(k, v)) for k in kernels for t in k.targets if t in TARGETS for v in k.variants}


def test_manifest_lists_every_kernel_for_every_target(built):
    d, _ = built
    for tree, test_only in (("", False), ("test-only", True)):
        m = _manifest(d, tree)
        assert m["schema"] == 1 and m["driver_floor"]
        got = {(e["target"], e["variant_key"]) for e in m["kernels"]}
        assert got == _keys(k for k in catalog.KERNELS if k.test_only == test_only), tree
        for t in TARGETS:
            assert m["toolchains"][t]["compiler_version"]


def test_the_kernel_left_out_of_the_seed_is_compiled_for_every_target(built):
    d, _ = built
    fresh = [e for e in _manifest(d)["kernels"] if e["name"] == FRESH]
    assert sorted(e["target"] for e in fresh) == sorted(TARGETS)
    assert all((d / "out" / e["object"]).stat().st_size > 0 for e in fresh)


def test_test_only_kernels_are_built_apart_from_the_shipped_ones(built):
    """A wheel packs <out>/manifest.json and <out>/<target>/*: nothing of the tests may be there."""
    d, _ = built
    test_only = {k.key for k in catalog.KERNELS if k.test_only}
    assert {"echo_params", "split_probe", "logits_tile"} <= test_only
    assert not {"fill_u32", "copy_u32x4", "wgmma_peak"} & test_only  # DeviceArray.fill and the bench ceilings
    assert not test_only & {e["name"] for e in _manifest(d)["kernels"]}
    shipped_files = {p.name for t in TARGETS for p in (d / "out" / t).iterdir()}
    assert not {n for n in shipped_files if n.split(".")[0] in test_only}, shipped_files
    for root, e in _entries(d):
        assert (root / e["object"]).is_file() and (e["name"] in test_only) == (root.name == "test-only")


def test_the_wheel_globs_pick_up_no_test_only_object():
    tomllib = pytest.importorskip("tomllib")
    import fnmatch
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["hipindexer"]
    assert any(fnmatch.fnmatch("kernels/gfx950/fill_u32.hsaco", g) for g in globs)
    for path in ("kernels/test-only/gfx950/echo_params.hsaco", "kernels/test-only/manifest.json",
                 "kernels/emu-gfx950/fill_u32.so"):
        assert not any(fnmatch.fnmatch(path, g) for g in globs), path


def test_an_object_the_manifest_no_longer_lists_is_removed(built):
    d, args = built
    stray = d / "out" / TARGETS[0] / f"echo_params.{'hsaco' if TARGETS[0] == 'gfx950' else 'cubin'}"
    stray.write_bytes(b"left over from a build before echo_params became test-only")
    assert build.main(args) == 0
    assert not stray.exists()


def test_objects_are_raw_elf_for_the_right_machine(built):
    d, _ = built
    for root, e in _entries(d):
        data = (root / e["object"]).read_bytes()
        assert data[:4] == b"\x7fELF", e["object"]
        elf = codeobj.Elf(data)
        assert elf.machine == (224 if e["target"] == "gfx950" else 190)
        assert e["symbol"] + (".kd" if e["target"] == "gfx950" else "") in elf.symbols()


def test_param_size_from_code_object_equals_mirror(built):
    d, _ = built
    for root, e in _entries(d):
        data = (root / e["object"]).read_bytes()
        want = catalog.STRUCT[e["params"]].size
        if e["target"] == "gfx950":
            _, size = codeobj.amdgpu_param_struct(codeobj.amdgpu_kernel(data, e["symbol"]))
        else:
            (p,) = codeobj.cuda_params(data, e["symbol"])
            size = p["size"]
        assert size == e["param_size"] == want, e["variant_key"]


@pytest.mark.skipif("gfx950" not in TARGETS, reason="no AMD toolchain")
def test_gfx950_note_resources_equal_asm_report(built):
    d, _ = built
    for root, e in _entries(d):
        if e["target"] != "gfx950":
            continue
        r = e["resources"]
        for k in ("vgpr", "agpr", "sgpr", "scratch", "occupancy", "lds"):
            assert r["asm"][k] == r[k], (e["variant_key"], k)
        assert r["max_flat_workgroup_size"] == e["block"]
        assert codeobj.Elf((root / e["object"]).read_bytes()).abiversion == 3  # code object v5


def test_occupancy_formula_matches_gfx950_doc():
    occ = resources.gfx950_occupancy
    assert occ(194, 0, 0, 256) == 2
    assert occ(120, 0, 0, 256) == 4
    assert occ(68, 0, 0, 256) == 7
    assert occ(5, 0, 0, 256) == 8
    assert occ(5, 0, 65536, 256) == 2  # 2 workgroups of 4 waves per CU over 4 SIMDs
    assert occ(94, 0, 30272, 128) == 3  # 5 workgroups of 2 waves: 10 waves, 3 on some SIMDs
    assert occ(51, 0, 1024, 256, sgpr=104) == 7  # past 100 SGPRs: 7 waves
    assert occ(51, 0, 1024, 256, sgpr=98) == 8   # LLVM's step, where 800 SGPRs in granules of 16 would give 7
    assert occ(51, 0, 1024, 256, sgpr=90) == 8


def test_second_build_is_incremental(built):
    d, args = built
    before = {p: p.stat().st_mtime_ns for p in (d / "out").rglob("*.*") if p.suffix != ".json"}
    manifests = {p: p.read_text() for p in (d / "out").rglob("manifest.json")}
    assert len(manifests) == 2
    assert build.main(args) == 0
    assert before == {p: p.stat().st_mtime_ns for p in before}
    assert manifests == {p: p.read_text() for p in manifests}


ENTRY_FIELDS = {"name", "symbol", "target", "variant", "variant_key", "object", "sha256", "source", "source_hash",
                "compiler", "compiler_version", "toolchain_mode", "flags", "params", "param_size", "block",
                "dynamic_smem", "resources"}


def test_manifest_entries_carry_every_field_the_runtime_and_tools_read(built):
    d, _ = built
    for tree in ("", "test-only"):
        assert set(_manifest(d, tree)) == {"schema", "kernels", "toolchains", "driver_floor"}
    for _, e in _entries(d):
        assert set(e) == ENTRY_FIELDS, e["variant_key"]
        assert e["dynamic_smem"] == catalog.KERNEL[e["name"]].smem_for(e["target"])
        assert "<src>" in " ".join(e["flags"]) and str(d) not in " ".join(e["flags"])  # hashes survive a move


def test_build_modules_import_without_numpy_or_the_package():
    """A wheel build runs build.py in an isolated environment: no numpy, hipindexer not installed."""
    probe = f"""
import importlib.abc, importlib.util, pkgutil, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("numpy", "ml_dtypes", "hipindexer", "click"):
            raise ImportError("isolated build: no " + name)
sys.meta_path.insert(0, Refuse())
spec = importlib.util.spec_from_file_location("build_probe", {str(ROOT / "build.py")!r})
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
import hxbuild
names = [m.name for m in pkgutil.iter_modules(hxbuild.__path__)]
for n in names:
    importlib.import_module("hxbuild." + n)
print(" ".join(sorted(names)))
"""
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd="/")
    assert p.returncode == 0, p.stderr
    assert set(p.stdout.split()) >= {"toolchains", "resources", "manifest", "jobs", "compile", "builder"}


def _stale_report_after_touching(path, check, capsys) -> str:
    """--check's complaint while `path` carries an extra line; the file is restored and --check passes again."""
    original = path.read_text()
    path.write_text(original + "\n// touched\n")
    capsys.readouterr()
    assert build.main(check) == 1
    err = capsys.readouterr().err
    path.write_text(original)
    assert build.main(check) == 0
    return err


def test_check_passes_then_names_stale_kernels(built, capsys):
    d, args = built
    check = args + ["--check"]
    assert build.main(check) == 0
    err = _stale_report_after_touching(d / "src" / "generic" / "fill.hip", check, capsys)
    assert "fill_u32" in err and "echo_params" not in err
    err = _stale_report_after_touching(d / "src" / "common" / "platform.h", check, capsys)
    assert "fill_u32" in err and "echo_params" in err


def test_check_notices_a_changed_object(built, capsys):
    d, args = built
    e = _manifest(d)["kernels"][0]
    obj = d / "out" / e["object"]
    data = obj.read_bytes()
    obj.write_bytes(data + b"\0")
    try:
        capsys.readouterr()
        assert build.main(args + ["--check"]) == 1
        assert e["variant_key"] in capsys.readouterr().err
    finally:
        obj.write_bytes(data)


def test_missing_amd_toolchain_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.delenv("HIPCC", raising=False)
    monkeypatch.setattr(toolchains.shutil, "which", lambda name: None)
    monkeypatch.setattr(toolchains, "HIPCC_FIXED", [])
    monkeypatch.setattr(toolchains, "has_ziglang", lambda: False)
    with pytest.raises(build.ToolchainError, match=r"gfx950.*pip install ziglang==0\.17\.1"):
        toolchains.find_amd(tmp_path)
    assert build.main(["--target", "gfx950", "--out", str(tmp_path / "o"), "--work", str(tmp_path / "w"), "--quiet"]) == 2


def test_missing_nvidia_toolchain_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("NVCC", raising=False)
    monkeypatch.setattr(toolchains.shutil, "which", lambda name: None)
    monkeypatch.setattr(toolchains, "NVCC_FIXED", [])
    monkeypatch.setattr(toolchains, "pypi_cuda_nvcc", lambda: None)
    with pytest.raises(build.ToolchainError, match=r"sm_90a.*nvidia-cuda-nvcc-cu12"):
        toolchains.find_nvidia()


def test_param_size_disagreement_fails_naming_the_kernel(built, monkeypatch, tmp_path):
    d, _ = built
    t = TARGETS[0]
    args = ["--src", str(d / "src"), "--out", str(tmp_path / "o"), "--work", str(tmp_path / "w"), "--target", t, "--quiet"]
    good_header = catalog.header_text()
    monkeypatch.setattr(catalog, "KERNELS", [catalog.KERNEL["fill_u32"]])  # the others' builds would prove nothing
    monkeypatch.setattr(catalog.STRUCT["FillParams"], "size", 32)
    # The generated header's static_assert stops it first...
    with pytest.raises(build.BuildError, match=r"(?s)fill_u32: .*sizeof FillParams"):
        builder.build((t,), d / "src", tmp_path / "o", tmp_path / "w", force=True)
    assert build.main(args) == 2
    # ...and with a header that compiles, the code object's own size does.
    monkeypatch.setattr(catalog, "header_text", lambda: good_header)
    with pytest.raises(build.BuildError, match=r"fill_u32: code object says FillParams is 24 bytes.*mirror says 32"):
        builder.build((t,), d / "src", tmp_path / "o", tmp_path / "w", force=True)


def test_a_serialised_wgmma_fails_the_build_naming_ptxas_note():
    note = ("ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are serialized "
            "due to non wgmma instructions reading accumulator registers of  a wgmma between start and end of "
            "the pipeline stage in the function 'hx_k'")
    assert resources.serialised_wgmma("ptxas info    : Used 96 registers\n" + note + "\n") == note
    assert resources.serialised_wgmma("ptxas info    : Used 96 registers, used 1 barriers\n") is None
    with pytest.raises(build.BuildError, match="C7514"):
        resources.cuda_resources(b"", note, "hx_k")


def test_an_emulated_kernel_is_rebuilt_for_what_it_reads_not_where_it_sits(tmp_path):
    """hxbuild.emu's digest: a moved copy of the sources and the build stays current (a planted tree of
    tools/support/mutate.py starts from the clean build's objects), a header the kernel does not include
    rebuilds nothing, one it includes rebuilds it."""
    from hxbuild import emu
    if not emu.available():
        pytest.skip("no host compiler for the emulator")

    def build_fill(d):
        inc = d / "work" / "include"
        inc.mkdir(parents=True, exist_ok=True)
        (inc / "hx_params.h").write_text(catalog.header_text())
        k = catalog.KERNEL["fill_u32"]
        so = emu.build_kernel(d / "src" / k.source, [(k.symbol, k.params, k.block)], d / "out" / "fill.so",
                              d / "out" / "lib", [f"HX_BLOCK={k.block}"], [inc], rpath="$ORIGIN/lib", src=d / "src")
        emu.build_runtime(d / "out" / "lib", src=d / "src")
        return {p.name: p.stat().st_mtime_ns for p in (d / "out").rglob("*.so")}

    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(ROOT / "hsaco_src", a / "src")
    built_a = build_fill(a)
    shutil.copytree(a, b)
    assert build_fill(b) == built_a, "a moved build was rebuilt"
    (b / "src" / "common" / "topk_select.h").write_text((b / "src" / "common" / "topk_select.h").read_text() + "//\n")
    assert build_fill(b) == built_a, "a header fill.hip does not include rebuilt it"
    (b / "src" / "common" / "platform.h").write_text((b / "src" / "common" / "platform.h").read_text() + "//\n")
    assert build_fill(b)["fill.so"] != built_a["fill.so"]


def test_check_names_an_emulator_library_built_from_other_sources(tmp_path):
    from hxbuild import emu
    if not emu.available():
        pytest.skip("no host compiler for the emulator")
    shutil.copytree(ROOT / "hsaco_src" / "emu", tmp_path / "src" / "emu")
    lib = tmp_path / "lib"
    emu.build_runtime(lib, src=tmp_path / "src")
    assert emu.stale_libraries(lib, tmp_path / "src") == []
    fiber = tmp_path / "src" / "emu" / "fiber.c"
    fiber.write_text(fiber.read_text() + "//\n")
    assert [p.split(" ", 1)[0] for p in emu.stale_libraries(lib, tmp_path / "src")] == ["lib/libhxemu.so"]
    (tmp_path / "src" / "emu" / "core.h").write_text((tmp_path / "src" / "emu" / "core.h").read_text() + "//\n")
    assert len(emu.stale_libraries(lib, tmp_path / "src")) == 2, "a header: both libraries"
    (lib / "libamdhip64.so").unlink()
    assert "lib/libamdhip64.so is missing" in emu.stale_libraries(lib, tmp_path / "src")


def test_emu_only_needs_a_gfx950_build_to_go_over(tmp_path, capsys):
    """build.py --emu-only (mutate.py's planted trees) builds the emulated twins over the gfx950 objects of a
    build; with none in --out it says so."""
    with pytest.raises(SystemExit) as e:
        build.main(["--emu-only", "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"), "--quiet"])
    assert e.value.code == 2 and "has none" in capsys.readouterr().err
