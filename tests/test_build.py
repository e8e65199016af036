"""build.py end to end: both targets from scratch into a temp dir, manifest
contents, resources cross-checks, --check staleness, missing toolchains."""

import json
import shutil
from pathlib import Path

import pytest
from by_path import load as _load

ROOT = Path(__file__).resolve().parents[1]


build = _load("_hx_build_test", ROOT / "build.py")
catalog, codeobj = build.catalog, build.codeobj


def _have(target):
    try:
        build.find_toolchain(target, Path("/tmp/hx-probe-work"))
        return True
    except build.ToolchainError:
        return False


TARGETS = [t for t in build.TARGETS if _have(t)]
pytestmark = pytest.mark.toolchain


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if not TARGETS:
        pytest.skip("no kernel toolchain")
    pytest.importorskip("msgpack")
    d = tmp_path_factory.mktemp("build")
    shutil.copytree(ROOT / "hsaco_src", d / "src")
    args = ["--src", str(d / "src"), "--out", str(d / "out"), "--work", str(d / "work"), "-j", "2", "--quiet"]
    args += [a for t in TARGETS for a in ("--target", t)]
    assert build.main(args) == 0
    return d, args


def _manifest(d):
    return json.loads((d / "out" / "manifest.json").read_text())


def test_manifest_lists_every_kernel_for_every_target(built):
    d, _ = built
    m = _manifest(d)
    assert m["schema"] == 1 and m["driver_floor"]
    got = {(e["target"], e["variant_key"]) for e in m["kernels"]}
    want = {(t, catalog.variant_key(k, v)) for k in catalog.KERNELS for t in k.targets if t in TARGETS for v in k.variants}
    assert got == want
    for t in TARGETS:
        assert m["toolchains"][t]["compiler_version"]


def test_objects_are_raw_elf_for_the_right_machine(built):
    d, _ = built
    for e in _manifest(d)["kernels"]:
        data = (d / "out" / e["object"]).read_bytes()
        assert data[:4] == b"\x7fELF", e["object"]
        elf = codeobj.Elf(data)
        assert elf.machine == (224 if e["target"] == "gfx950" else 190)
        assert e["symbol"] + (".kd" if e["target"] == "gfx950" else "") in elf.symbols()


def test_param_size_from_code_object_equals_mirror(built):
    d, _ = built
    for e in _manifest(d)["kernels"]:
        data = (d / "out" / e["object"]).read_bytes()
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
    for e in _manifest(d)["kernels"]:
        if e["target"] != "gfx950":
            continue
        r = e["resources"]
        for k in ("vgpr", "agpr", "sgpr", "scratch", "occupancy", "lds"):
            assert r["asm"][k] == r[k], (e["variant_key"], k)
        assert r["max_flat_workgroup_size"] == e["block"]
        assert codeobj.Elf((d / "out" / e["object"]).read_bytes()).abiversion == 3  # code object v5


def test_occupancy_formula_matches_gfx950_doc():
    assert build.gfx950_occupancy(194, 0, 0, 256) == 2
    assert build.gfx950_occupancy(120, 0, 0, 256) == 4
    assert build.gfx950_occupancy(68, 0, 0, 256) == 7
    assert build.gfx950_occupancy(5, 0, 0, 256) == 8
    assert build.gfx950_occupancy(5, 0, 65536, 256) == 2  # 2 workgroups of 4 waves per CU over 4 SIMDs
    assert build.gfx950_occupancy(94, 0, 30272, 128) == 3  # 5 workgroups of 2 waves: 10 waves, 3 on some SIMDs


def test_second_build_is_incremental(built):
    d, args = built
    before = {p: p.stat().st_mtime_ns for p in (d / "out").rglob("*.*") if p.suffix != ".json"}
    assert build.main(args) == 0
    assert before == {p: p.stat().st_mtime_ns for p in before}


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
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    monkeypatch.setattr(build, "HIPCC_FIXED", [])
    monkeypatch.setattr(build, "_has_ziglang", lambda: False)
    with pytest.raises(build.ToolchainError, match=r"gfx950.*pip install ziglang==0\.17\.1"):
        build.find_amd(tmp_path)
    assert build.main(["--target", "gfx950", "--out", str(tmp_path / "o"), "--work", str(tmp_path / "w"), "--quiet"]) == 2


def test_missing_nvidia_toolchain_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("NVCC", raising=False)
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    monkeypatch.setattr(build, "NVCC_FIXED", [])
    monkeypatch.setattr(build, "_pypi_cuda_nvcc", lambda: None)
    with pytest.raises(build.ToolchainError, match=r"sm_90a.*nvidia-cuda-nvcc-cu12"):
        build.find_nvidia()


def test_param_size_disagreement_fails_naming_the_kernel(built, monkeypatch, tmp_path):
    d, _ = built
    t = TARGETS[0]
    args = ["--src", str(d / "src"), "--out", str(tmp_path / "o"), "--work", str(tmp_path / "w"), "--target", t, "--quiet"]
    ns = build.argparse.Namespace(force=True, jobs=1, quiet=True)
    good_header = catalog.header_text()
    monkeypatch.setattr(catalog.STRUCT["FillParams"], "size", 32)
    # The generated header's static_assert stops it first...
    with pytest.raises(build.BuildError, match=r"(?s)fill_u32: .*sizeof FillParams"):
        build._build(ns, (t,), d / "src", tmp_path / "o", tmp_path / "w")
    assert build.main(args) == 2
    # ...and with a header that compiles, the code object's own size does.
    monkeypatch.setattr(catalog, "header_text", lambda: good_header)
    with pytest.raises(build.BuildError, match=r"fill_u32: code object says FillParams is 24 bytes.*mirror says 32"):
        build._build(ns, (t,), d / "src", tmp_path / "o", tmp_path / "w")


def test_a_serialised_wgmma_fails_the_build_naming_ptxas_note():
    note = ("ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are serialized "
            "due to non wgmma instructions reading accumulator registers of  a wgmma between start and end of "
            "the pipeline stage in the function 'hx_k'")
    assert build.serialised_wgmma("ptxas info    : Used 96 registers\n" + note + "\n") == note
    assert build.serialised_wgmma("ptxas info    : Used 96 registers, used 1 barriers\n") is None
    with pytest.raises(build.BuildError, match="C7514"):
        build.cuda_resources(b"", note, "hx_k")
