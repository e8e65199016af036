"""The catalog's one declaration gives a ctypes mirror and a C header that agree."""

import ctypes
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from by_path import load as _load

ROOT = Path(__file__).resolve().parents[1]


catalog = _load("_hx_catalog_test", ROOT / "hipindexer" / "catalog.py")


@pytest.mark.parametrize("s", catalog.STRUCTS, ids=lambda s: s.name)
def test_mirror_matches_declared_layout(s):
    cls = s.ctype()
    assert ctypes.sizeof(cls) == s.size
    for name, off in s.offsets.items():
        assert getattr(cls, name).offset == off
    assert s.size % s.align == 0


def test_echo_layout_has_64_aligned_blob_with_padding_around_it():
    s = catalog.STRUCT["EchoParams"]
    assert s.offsets["f_f32"] + 4 < s.offsets["blob"] == 64  # inner padding before the blob
    assert s.offsets["g_f64"] == 64 + 128 and s.align == 64 and s.size == 256
    kinds = {spec if isinstance(spec, str) else "blob" for _, spec in s.fields}
    assert {"u8", "i32", "u32", "i64", "u64", "f32", "f64", "ptr", "blob"} <= kinds


def test_blob_alignment_generic():
    s = catalog.Struct("T", [("a", "u8"), ("b", catalog.Blob(size=128, align=64)), ("c", "u32")])
    assert s.offsets == {"a": 0, "b": 64, "c": 192} and s.size == 256
    assert ctypes.sizeof(s.ctype()) == 256


def test_pack_round_trip_and_strictness():
    s = catalog.STRUCT["EchoParams"]
    vals = dict(out=0x1122334455667788, a_u8=0xA5, b_i32=-7, c_u32=0xDEADBEEF, d_i64=-(1 << 40),
                e_u64=(1 << 63) + 5, f_f32=1.5, blob=bytes(range(128)), g_f64=-2.25, h_ptr=0xCAFE, tail_u8=0x5A)
    raw = s.pack(**vals)
    assert len(raw) == s.size
    inst = s.ctype().from_buffer_copy(raw)
    assert inst.b_i32 == -7 and inst.e_u64 == (1 << 63) + 5 and inst.g_f64 == -2.25
    assert raw[64:192] == bytes(range(128)) and raw[208] == 0x5A
    assert raw[9:12] == b"\0\0\0" and raw[44:64] == bytes(20)  # padding is zero
    with pytest.raises(TypeError):
        s.pack(**{k: v for k, v in vals.items() if k != "tail_u8"})
    with pytest.raises(TypeError):
        s.pack(bogus=1, **vals)


def test_variant_key_is_a_plain_file_name():
    k = catalog.Kernel("x", "generic/x.hip", "hx_x", "FillParams", block=64)
    assert catalog.variant_key(k, {}) == "x"
    assert catalog.variant_key(k, {"H": 64, "D": 128}) == "x.D-128.H-64"
    with pytest.raises(ValueError):
        catalog.variant_key(k, {"H": "6 4"})


def _header_probe(tmp_path):
    (tmp_path / "hx_params.h").write_text(catalog.header_text())
    src = tmp_path / "probe.hip"
    src.write_text('#include "hx_params.h"\n')
    return src


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_header_static_asserts_hold_on_host(tmp_path):
    src = _header_probe(tmp_path)
    p = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-x", "c++", str(src)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_header_catches_a_wrong_offset(tmp_path):
    if shutil.which("g++") is None:
        pytest.skip("no host C++ compiler")
    text = catalog.header_text().replace("blob) == 64", "blob) == 48")
    (tmp_path / "bad.h").write_text(text)
    p = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-x", "c++", str(tmp_path / "bad.h")], capture_output=True, text=True)
    assert p.returncode != 0 and "EchoParams.blob" in p.stderr


@pytest.mark.toolchain
def test_header_static_asserts_hold_for_gfx950(tmp_path):
    pytest.importorskip("ziglang")
    src = _header_probe(tmp_path)
    p = subprocess.run(
        [sys.executable, "-m", "ziglang", "clang", "-x", "hip", "--offload-arch=gfx950", "--cuda-device-only",
         "-nogpulib", "-nogpuinc", "-std=c++17", "-fsyntax-only", str(src)],
        capture_output=True, text=True,
    )
    assert p.returncode == 0, p.stderr


@pytest.mark.toolchain
def test_header_static_asserts_hold_for_sm90a(tmp_path):
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").is_file() else None)
    if nvcc is None:
        pytest.skip("no nvcc")
    src = _header_probe(tmp_path)
    p = subprocess.run([nvcc, "-x", "cu", "-std=c++17", "-ptx", "-gencode=arch=compute_90a,code=sm_90a",
                        str(src), "-o", str(tmp_path / "p.ptx")], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
