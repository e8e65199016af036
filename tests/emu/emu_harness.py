"""Drive emulated kernels straight through libhxemu (no HIP runtime, no hip-python).

Used by the primitive tests: a kernel .so built by hxbuild.emu, its
descriptor found by symbol, launched with a packed param struct.
"""
import ctypes
from pathlib import Path

import numpy as np


class EmuKernel(ctypes.Structure):
    _fields_ = [("symbol", ctypes.c_char_p), ("param_size", ctypes.c_uint), ("max_block", ctypes.c_uint),
                ("lane", ctypes.c_void_p)]


class PrimParams(ctypes.Structure):
    _fields_ = [("in0", ctypes.c_void_p), ("in1", ctypes.c_void_p), ("out0", ctypes.c_void_p),
                ("out1", ctypes.c_void_p), ("n", ctypes.c_uint32), ("x", ctypes.c_uint32), ("y", ctypes.c_uint32),
                ("z", ctypes.c_uint32)]


class LaunchError(RuntimeError):
    pass


class EmuLib:
    def __init__(self, so: Path, lib_dir: Path):
        self.core = ctypes.CDLL(str(Path(lib_dir) / "libhxemu.so"))
        self.core.hx_emu_launch.restype = ctypes.c_int
        self.core.hx_emu_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_ulong,
                                            ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint), ctypes.c_ulong]
        self.core.hx_emu_last_error.restype = ctypes.c_char_p
        self.lib = ctypes.CDLL(str(so))

    def stats(self):
        out = (ctypes.c_ulonglong * 3)()
        self.core.hx_emu_stats(out)
        return {"switches": out[0], "prims": out[1], "lanes": out[2]}

    def launch(self, symbol, params, grid=1, block=64):
        k = EmuKernel.in_dll(self.lib, "hx_emu_kernel_" + symbol)
        g = (ctypes.c_uint * 3)(*((grid, 1, 1) if isinstance(grid, int) else grid))
        b = (ctypes.c_uint * 3)(*((block, 1, 1) if isinstance(block, int) else block))
        rc = self.core.hx_emu_launch(ctypes.addressof(k), ctypes.addressof(params), ctypes.sizeof(params), g, b, 0)
        if rc:
            raise LaunchError(self.core.hx_emu_last_error().decode())


def ptr(a: np.ndarray) -> int:
    return a.ctypes.data


ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "emu-test"  # git-ignored; every build below is incremental
PRIM_KERNELS = ["hx_t_mfma32", "hx_t_mfma16", "hx_t_permlane", "hx_t_permlane16", "hx_t_readlane", "hx_t_ballot",
                "hx_t_gather", "hx_t_scalar",
                "hx_t_shfl", "hx_t_buffer", "hx_t_fp8", "hx_t_lds", "hx_t_lds_count", "hx_t_pk_clamp", "hx_t_misuse",
                "hx_t_stray", "hx_t_order", "hx_t_uninit"]


def _emubuild():
    from hxbuild import emu
    return emu


def toolchain_missing():
    """Why the emulator cannot be built here, or None."""
    try:
        eb = _emubuild()
        eb.host_clang(), eb.host_cc()
        return None
    except Exception as e:
        return str(e)


def prims_lib() -> EmuLib:
    eb = _emubuild()
    lib = BUILD / "lib"
    eb.build_runtime(lib)
    so = eb.build_kernel(ROOT / "tests" / "emu" / "prims.hip", [(s, "PrimParams", 64) for s in PRIM_KERNELS],
                         BUILD / "prims.so", lib)
    return EmuLib(so, lib)


def _mutate():
    from tools.support import mutate  # on use: it needs click, which the primitive tests do not
    return mutate


def logits_tile_plants():
    """Bugs the logits tile's suite (logits_cases.py) must catch, as tools/support/mutate.py plants them: text
    substitutions on a copy of hsaco_src/, so the shipped source carries no hooks."""
    Plant, f = _mutate().Plant, "gfx950/logits_tile.hip"
    return [
        Plant("window_off_by_one", f, "const bool inside = n >= w.lo && n < w.hi;",
              "const bool inside = n >= w.lo && n <= w.hi;"),
        Plant("wrong_lane_half", f, "const hx_i32 m = g ? m1 : m0;", "const hx_i32 m = g ? m0 : m1;"),
        Plant("dropped_scale", f, "v *= p.kv_scale[n];", "v *= 1.0f;"),
    ]


def _planted_sources(plant) -> Path:
    """hsaco_src/ itself, or a copy of it under BUILD with `plant` applied."""
    src = ROOT / "hsaco_src"
    if plant is None:
        return src
    import shutil
    copy = BUILD / "plants" / plant.name / "src"
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(src, copy)
    _mutate().apply(copy, plant)
    return copy


def logits_tile_lib(plant=None) -> EmuLib:
    """hsaco_src/gfx950/logits_tile.hip for the emulator, optionally with a plant of logits_tile_plants()."""
    from hipindexer import catalog
    eb = _emubuild()
    inc = BUILD / "include"
    inc.mkdir(parents=True, exist_ok=True)
    hdr = inc / "hx_params.h"
    if not hdr.is_file() or hdr.read_text() != catalog.header_text():
        hdr.write_text(catalog.header_text())
    k = catalog.KERNEL["logits_tile"]
    src = _planted_sources(plant)
    so = eb.build_kernel(src / k.source, [(k.symbol, k.params, k.block)],
                         BUILD / f"logits_tile{'.' + plant.name if plant else ''}.so", BUILD / "lib",
                         [f"HX_BLOCK={k.block}"], [inc], src=src)
    return EmuLib(so, BUILD / "lib")


def _package_copy(kernels: Path):
    """The package copy (tools/support/package_copy.py) whose kernels/ folder is `kernels`."""
    from tools.support.package_copy import PackageCopy
    return PackageCopy(Path(kernels).parent.parent)


def build_emu_package() -> Path:
    """gfx950 objects + their emulated twins, built (incrementally, the first time from the checkout's own
    build) by build.py into the kernels/ folder of a package copy under BUILD/pkg, which it returns: the
    children below import that copy, so its runtime and its emulator run this build."""
    from hxbuild.toolchains import find_toolchain
    pkg = _package_copy(BUILD / "pkg" / "hipindexer" / "kernels").seed().refresh()
    find_toolchain("gfx950", pkg.root / "work")  # raises ToolchainError when missing
    p = pkg.build(["gfx950", "emu-gfx950"], extra=["-j", "2"])
    assert p.returncode == 0, p.stderr[-3000:]
    return pkg.kernels


def run_cli(kernels: Path, *args, timeout=1200):
    """`python -m hipindexer.cli *args` on the package copy that holds `kernels`."""
    return _package_copy(kernels).run(["-m", "hipindexer.cli", *args], emulated=True, timeout=timeout)


def run_child_pytest(kernels: Path, *files):
    """Run test files (relative to the checkout) in a child pytest whose hipindexer is the package copy that
    holds `kernels` and whose HIP is the emulator (-p emu_session). The checkout's pyproject.toml would put
    the checkout first on sys.path (pytest's `pythonpath`), where its own hipindexer/ wins over the copy's:
    the child's pythonpath is the copy's root instead, then the tests' folders, then the checkout (for tools/,
    its hipindexer/ behind the copy's)."""
    import shlex
    pkg = _package_copy(kernels)
    pythonpath = shlex.join([str(pkg.root), str(ROOT / "tests"), str(ROOT / "tests" / "emu"), str(ROOT)])
    return pkg.run(
        ["-m", "pytest", "-q", "-p", "emu_session", "-p", "no:cacheprovider", "-m", "", "--rootdir", ROOT,
         "-c", ROOT / "pyproject.toml", "-o", f"pythonpath={pythonpath}", *(ROOT / f for f in files)],
        ROOT / "tests" / "emu", emulated=True, timeout=900)


def assert_cases_pass_and_every_plant_fails_them(plant_set: str, count: int) -> None:
    """tools/support/mutate.py on a set whose suite is a cases file (its SET_TESTS): the unplanted build passes all
    `count` tests of the file, none skipped, and every plant of the set fails them. One run serves both claims, since
    the harness runs the whole unplanted suite before it counts a plant as caught."""
    import mutation_runs
    clean, planted, p = mutation_runs.results(plant_set)
    assert not clean["caught"] and f"{count} passed" in clean["how"] and "skipped" not in clean["how"], clean
    assert planted and all(r["caught"] for r in planted), [r for r in planted if not r["caught"]]
    assert p.returncode == 0, p.stderr[-2000:]
