#!/usr/bin/env python3
"""ISA lint for gfx950 assembly (clang -S): what the CPU emulator cannot see.

Per kernel function:
  - v_permlane32_swap_b32 and v_permlane16_swap_b32 name two distinct registers
    (clang 22.1.8's builtin returned one register for both results) and are
    preceded by s_nop >= 1 (the 2 wait states after a VALU write of a source);
  - no canonicalize before the ReLU max: v_max_f32 x, y, y is how a
    canonicalize is emitted (build with -fno-honor-nans);
  - 16-byte loads where the source asks for them: a source calling
    hx_buffer_load_b128 / hx_lds_load_b128 must yield buffer_load_dwordx4
    (with `lds` for the latter), hx_global_load_b128 global_load_dwordx4;
  - no scratch: ScratchSize 0;
  - no waterfall loop (v_readfirstlane of an address, v_cmp_eq against it, exec
    narrowed and restored in a loop): what the compiler emits around a buffer
    access whose base or range it does not see as wave-uniform;
  - scaled MFMAs take their E8M0 scales from VGPRs (llvm-project pull request 158117: the
    hardware misreads inline or scalar constants there).

    python -m tools.support.isa_lint [SOURCE.hip ...]   (default: every gfx950 catalog kernel)
"""
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_FUNC = re.compile(r"-- Begin function (\S+)\n(.*?)(?=-- Begin function|\Z)", re.S)
_SWAP = re.compile(r"^\s*v_permlane(?:16|32)_swap_b32(?:_e32)?\s+(v\d+),\s*(v\d+)", re.M)
_CANON = re.compile(r"^\s*(v_max_f32(?:_e32|_e64)?|v_pk_max_f32)\s+(v\S+),\s*(v\S+),\s*(v\S+)", re.M)
_WATERFALL = re.compile(r"v_readfirstlane_b32[^\n]*\n(?:[^\n]*\n){0,6}?\s*v_cmp_eq_u(?:32|64)\w*\s[^\n]*\n"
                        r"(?:[^\n]*\n){0,12}?\s*s_xor_b64 exec, exec")
_NOP = re.compile(r"^\s*s_nop\s+(\d+)")
_MFMA_SCALE = re.compile(r"^\s*v_mfma_scale_\S+\s+([^;]*?)(?:\s+op_sel\S*)*\s*$")


def _code_lines(body):
    for line in body.splitlines():
        s = line.split(";", 1)[0].strip()
        if s and not s.startswith(".") and not s.endswith(":"):
            yield s


_DEF = re.compile(r"HX_KERNEL[^\n]*?\bvoid\s+(\w+)\s*\(|KERNEL\((\w+)\)|HX_WAVE_FN[^\n(]*?\b(\w+)\s*\(")


def _regions(source: str) -> dict:
    """Function name -> its source text (up to the next definition)."""
    defs = [(m.start(), next(g for g in m.groups() if g)) for m in _DEF.finditer(source)]
    return {name: source[a:b] for (a, name), (b, _) in zip(defs, defs[1:] + [(len(source), "")])}


def _asks(source: str, kernel: str, call: str) -> bool:
    """Does `kernel`'s text, or a helper it reaches, call `call`?"""
    regions, seen, todo = _regions(source), set(), [kernel]
    while todo:
        f = todo.pop()
        if f in seen or f not in regions:
            continue
        seen.add(f)
        text = regions[f]
        if re.search(rf"\b{call}\s*\(", text):
            return True
        todo += [g for g in regions if g != f and re.search(rf"\b{g}\s*\(", text)]
    return False


def lint(asm: str, source: str = "") -> list[str]:
    problems = []
    for name, body in _FUNC.findall(asm):
        want_x4 = _asks(source, name, "hx_buffer_load_b128")
        want_lds_x4 = _asks(source, name, "hx_lds_load_b128")
        want_gather_x4 = _asks(source, name, "hx_global_load_b128")
        m = re.search(r"^; ScratchSize: (\d+)", body, re.M)
        if m is None or int(m.group(1)) != 0:
            problems.append(f"{name}: ScratchSize {m.group(1) if m else '?'} (spills or a private array)")
        lines = list(_code_lines(body))
        for i, ln in enumerate(lines):
            sm = _SWAP.match(ln)
            if sm:
                if sm.group(1) == sm.group(2):
                    problems.append(f"{name}: permlane swap with one register for both operands: {ln}")
                prev = lines[i - 1] if i else ""
                nm = _NOP.match(prev)
                if not nm or int(nm.group(1)) < 1:
                    problems.append(f"{name}: permlane swap without s_nop >= 1 before it (after {prev!r}): {ln}")
            mm = _MFMA_SCALE.match(ln)
            if mm:
                scales = [o.strip() for o in mm.group(1).split(",")][-2:]
                if not all(re.fullmatch(r"v\d+", o) for o in scales):
                    problems.append(f"{name}: MFMA scale operands {scales} are not VGPRs: {ln}")
            cm = _CANON.match(ln)
            if cm and cm.group(3) == cm.group(4):
                problems.append(f"{name}: canonicalize before a max ({ln}): compile with -fno-honor-nans")
        if want_x4 and not re.search(r"\b(buffer|global)_load_dwordx4\b(?!.*\blds\b)", body):
            problems.append(f"{name}: the source asks for 16-byte loads (hx_buffer_load_b128), no buffer_load_dwordx4")
        if _WATERFALL.search(body):
            problems.append(f"{name}: a waterfall loop (readfirstlane, v_cmp_eq, s_xor_b64 exec): a buffer base or "
                            f"range the compiler does not see as uniform")
        if want_gather_x4 and not re.search(r"\bglobal_load_dwordx4\b", body):
            problems.append(f"{name}: the source asks for 16-byte gathers (hx_global_load_b128), no global_load_dwordx4")
        if want_lds_x4 and not re.search(r"\bbuffer_load_dwordx4\b.*\blds\b", body):
            problems.append(f"{name}: the source asks for 16-byte global->LDS loads, no buffer_load_dwordx4 ... lds")
    if not _FUNC.findall(asm):
        problems.append("no kernel functions in the assembly")
    return problems


def source_text(source: Path, defines=()) -> str:
    """A source with the text of the headers it includes from hsaco_src/ (gfx950/, common/), each once: the
    functions a kernel reaches, for _asks. A block under `#if NAME` or `#if !NAME` (with its #else) for a NAME
    the defines give (NAME=value), or a plain #define before it, keeps only the branch the build takes; every other
    conditional keeps both."""
    values = dict(d.split("=", 1) for d in defines if "=" in d)
    seen, out = set(), []

    def active(text: str) -> str:
        keep, stack = [], []  # stack: per open #if, (its branch taken or None when not ours, in #else)
        for line in text.splitlines():
            m = re.match(r"#if\s+(!?)(\w+)\s*$", line)
            if m and m.group(2) in values:
                stack.append([(values[m.group(2)] not in ("0", "")) != bool(m.group(1)), False])
                continue
            if line.startswith("#if"):
                stack.append([None, False])
            elif line.startswith("#else") and stack and stack[-1][0] is not None:
                stack[-1][1] = True
                continue
            elif line.startswith("#endif") and stack:
                if stack.pop()[0] is not None:
                    continue
            if all(t is None or t != e for t, e in stack):
                keep.append(line)
                d = re.match(r"#define\s+(\w+)\s+(\w+)\s*$", line)
                if d and d.group(1) not in values:  # a default the source sets (#ifndef NAME / #define NAME v)
                    values[d.group(1)] = d.group(2)
        return "\n".join(keep)

    def visit(path: Path):
        if path in seen:
            return
        seen.add(path)
        text = active(path.read_text())
        for name in re.findall(r'^#include "([^"]+)"', text, re.M):
            for d in (path.parent, ROOT / "hsaco_src" / "gfx950", ROOT / "hsaco_src" / "common"):
                if (d / name).is_file():
                    visit(d / name)
                    break
        out.append(text)

    visit(Path(source).resolve())
    return "\n".join(out)


def compile_asm(source: Path, defines=(), flags=None) -> str:
    """clang -S of a gfx950 source with build.py's device flags (plus the generated params header)."""
    from hipindexer import catalog
    with tempfile.TemporaryDirectory() as tmp:
        inc = Path(tmp) / "include"
        inc.mkdir()
        (inc / "hx_params.h").write_text(catalog.header_text())
        flags = flags if flags is not None else ["-O3", "-fno-honor-nans"]
        argv = [sys.executable, "-m", "ziglang", "clang", "-x", "hip", "--offload-arch=gfx950", "--cuda-device-only",
                "-nogpulib", "-nogpuinc", "-std=c++17", "-mcode-object-version=5", *flags,
                *(f"-D{d}" for d in defines), "-I", str(ROOT / "hsaco_src" / "common"),
                "-I", str(ROOT / "hsaco_src" / "gfx950"), "-I", str(inc), "-S", str(source), "-o", str(Path(tmp) / "k.s")]
        p = subprocess.run(argv, capture_output=True, text=True)
        if p.returncode:
            raise RuntimeError(f"clang -S {source} failed:\n{p.stderr}")
        return (Path(tmp) / "k.s").read_text()


def _default_sources():
    """(source, defines) of every gfx950 catalog kernel variant."""
    from hipindexer import catalog
    return [(ROOT / "hsaco_src" / k.source, [f"HX_BLOCK={k.block}"] + [f"{d}={v[d]}" for d in sorted(v)] +
             [f"{d}={x}" for d, x in k.defines])
            for k in catalog.KERNELS if k.source.startswith("gfx950/") for v in k.variants]


def main(argv=None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    sources = [(Path(a), ["HX_BLOCK=64"]) for a in args] or _default_sources()
    bad = 0
    for src, defines in sources:
        name = " ".join([src.name] + defines[1:])
        problems = lint(compile_asm(src, defines), source_text(src, defines))
        for p in problems:
            print(f"{name}: {p}")
        bad += bool(problems)
        if not problems:
            print(f"{name}: ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
