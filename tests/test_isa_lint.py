"""tools/support/isa_lint.py on the gfx950 assembly: the real kernels are clean, and
each rule fires on the defect it is for."""
import importlib.util
from pathlib import Path

import pytest

from tools.support import isa_lint as L

ROOT = Path(__file__).resolve().parents[1]

HAVE_CLANG = importlib.util.find_spec("ziglang") is not None
SOURCES = [ROOT / "hsaco_src" / "gfx950" / "logits_tile.hip", ROOT / "tests" / "emu" / "prims.hip"]


@pytest.mark.toolchain
@pytest.mark.skipif(not HAVE_CLANG, reason="needs ziglang's clang")
@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.name)
def test_gfx950_kernels_are_clean(src):
    asm = L.compile_asm(src, ["HX_BLOCK=64"])
    assert L.lint(asm, src.read_text()) == []
    assert "v_mfma_scale_f32_32x32x64_f8f6f4" in asm and "buffer_load_dwordx4" in asm
    if src.name == "prims.hip":
        assert "v_mfma_scale_f32_16x16x128_f8f6f4" in asm and "v_permlane32_swap_b32" in asm
        assert "ds_bpermute_b32" in asm and "v_readfirstlane_b32" in asm and "v_cvt_f32_fp8" in asm


@pytest.mark.toolchain
@pytest.mark.skipif(not HAVE_CLANG, reason="needs ziglang's clang")
def test_without_no_honor_nans_the_relu_canonicalizes():
    src = SOURCES[0]
    problems = L.lint(L.compile_asm(src, ["HX_BLOCK=64"], flags=["-O3"]), src.read_text())
    assert problems and all("canonicalize" in p for p in problems)


def _fn(body, scratch=0, name="k"):
    return f"\t; -- Begin function {name}\n{name}:\n{body}\n\t; -- End function\n; ScratchSize: {scratch}\n"


SWAP_SRC = "HX_KERNEL void k(P p) { hx_permlane32_swap(x, y); }"
GATHER_SRC = "HX_KERNEL void k(P p) { hx_global_load_b128(q); }"
# what clang emits for a buffer store whose range it took for divergent
WATERFALL = """	s_mov_b64 s[44:45], exec
.LBB0_118:
	v_readfirstlane_b32 s12, v10
	v_readfirstlane_b32 s13, v11
	v_readfirstlane_b32 s14, v22
	v_readfirstlane_b32 s15, v23
	v_cmp_eq_u64_e32 vcc, s[12:13], v[10:11]
	s_nop 0
	v_cmp_eq_u64_e64 s[10:11], s[14:15], v[22:23]
	s_and_b64 s[10:11], vcc, s[10:11]
	s_and_saveexec_b64 s[10:11], s[10:11]
	buffer_store_dword v2, v36, s[12:15], 0 offen
	s_xor_b64 exec, exec, s[10:11]
	s_cbranch_execnz .LBB0_118"""
LOAD_SRC = "HX_WAVE_FN hx_v8i op(hx_rsrc r) { return hx_buffer_load_b128(r, 0, 0); }\nHX_KERNEL void k(P p) { op(r); }"


@pytest.mark.parametrize("asm,src,msg", [
    (_fn("\ts_nop 1\n\tv_permlane32_swap_b32 v4, v17"), SWAP_SRC, None),
    (_fn("\ts_nop 1\n\tv_permlane32_swap_b32 v4, v4"), SWAP_SRC, "one register"),
    (_fn("\tv_add_f32_e32 v4, v1, v2\n\tv_permlane32_swap_b32 v4, v17"), SWAP_SRC, "without s_nop"),
    (_fn("\ts_nop 0\n\tv_permlane32_swap_b32 v4, v17"), SWAP_SRC, "without s_nop"),
    (_fn("\tv_max_f32_e32 v3, v2, v2\n\tv_max_f32_e32 v3, 0, v3"), "", "canonicalize"),
    (_fn("\tv_max_f32_e32 v3, 0, v3", scratch=16), "", "ScratchSize 16"),
    (_fn("\tbuffer_load_dwordx2 v[0:1], v2, s[4:7], 0 offen"), LOAD_SRC, "16-byte loads"),
    (_fn("\tbuffer_load_dwordx4 v[0:3], v2, s[4:7], 0 offen"), LOAD_SRC, None),
    (_fn("\tv_mfma_scale_f32_32x32x64_f8f6f4 v[0:15], v[18:25], v[26:33], v[0:15], v17, v17 op_sel_hi:[0,0,0]"), "", None),
    (_fn("\tv_mfma_scale_f32_32x32x64_f8f6f4 v[0:15], v[18:25], v[26:33], v[0:15], 0x7f, v17 op_sel_hi:[0,0,0]"), "",
     "not VGPRs"),
    (_fn("\tv_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[18:25], v[26:33], v[0:3], s4, s4"), "", "not VGPRs"),
    (_fn("\ts_nop 1\n\tv_permlane16_swap_b32 v4, v4"), SWAP_SRC, "one register"),
    (_fn("\tv_add_f32_e32 v4, v1, v2\n\tv_permlane16_swap_b32 v4, v17"), SWAP_SRC, "without s_nop"),
    (_fn("\tglobal_load_dword v0, v[2:3], off"), GATHER_SRC, "16-byte gathers"),
    (_fn("\tglobal_load_dwordx4 v[0:3], v[4:5], off"), GATHER_SRC, None),
    (_fn(WATERFALL), "", "waterfall loop"),
])
def test_each_rule_fires(asm, src, msg):
    problems = L.lint(asm, src)
    if msg is None:
        assert problems == []
    else:
        assert len(problems) == 1 and msg in problems[0], problems
