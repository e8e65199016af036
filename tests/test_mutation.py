"""The suite catches planted kernel bugs: tools/support/mutate.py on the emulated gfx950 build."""
import subprocess
import sys
from pathlib import Path

import pytest

import mutation_runs

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.toolchain


# The sets whose suite is a cases file (topk, paged_topk, paged_topk_fused_mfma, prefill_topk) run from that op's
# test file instead, where the harness's unplanted run of the cases is also the test that they pass.
@pytest.mark.mutation
@pytest.mark.parametrize("plant_set", ["generic", "decode", "cache"])
def test_every_plant_is_caught_by_the_emulated_sweep(emu_kernels, plant_set):
    clean, planted, p = mutation_runs.results(plant_set)
    assert not clean["caught"], clean
    assert planted and all(r["caught"] for r in planted), [r for r in planted if not r["caught"]]
    assert p.returncode == 0, p.stderr[-2000:]


def test_every_plant_matches_its_kernel_source_exactly_once():
    # A kernel edit that strands a plant must fail here, not halfway through a device run.
    import emu_harness
    from tools.support import mutate
    sets = {**mutate.PLANTS, "logits_tile (tests/emu/emu_harness.py)": emu_harness.logits_tile_plants()}
    for plant_set, plants in sets.items():
        for plant in plants:
            text = (ROOT / "hsaco_src" / plant.file).read_text()
            assert text.count(plant.old) == 1, (plant_set, plant.name, text.count(plant.old))
            assert plant.new != plant.old, (plant_set, plant.name)


def test_every_first_case_names_a_plant_of_its_set_and_a_test_its_file_collects():
    # A stale name stops the harness mid-run (run_tests); this finds it before that.
    from tools.support import mutate
    files = sorted({mutate.SET_TESTS[s] for s in mutate.FIRST_CASES})
    p = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", "",
                        "--rootdir", ROOT, "-c", ROOT / "pyproject.toml", *(ROOT / f for f in files)],
                       cwd=ROOT / "tests" / "emu", capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    collected = {tuple(line.split("::", 1)) for line in p.stdout.splitlines() if "::" in line}
    for plant_set, firsts in mutate.FIRST_CASES.items():
        assert set(firsts) <= {p.name for p in mutate.PLANTS[plant_set]}, plant_set
        tests = mutate.SET_TESTS[plant_set]
        missing = sorted(t for t in set(firsts.values()) if (tests, t) not in collected)
        assert not missing, (plant_set, missing)


def test_every_first_run_names_a_plant_of_a_command_set_and_replaces_only_its_cases():
    from tools.support import mutate
    for plant_set, firsts in mutate.FIRST_ARGS.items():
        assert plant_set in mutate.SET_CMDS and set(firsts) <= {p.name for p in mutate.PLANTS[plant_set]}, plant_set
        argv = mutate.SET_CMDS[plant_set].split() + ["--fail-fast"]
        for args in set(firsts.values()):
            got = mutate.with_cases(argv, args)
            at = argv.index("--cases")
            assert got[:at] == argv[:at] and got[at:at + len(args.split())] == args.split(), (plant_set, got)
            assert got[at + len(args.split()):] == argv[at + 2:], (plant_set, got)


def test_a_set_s_own_kernels_have_gfx950_builds_and_a_launch_outside_them_stops_the_harness():
    # A planted tree of a set in SET_KERNELS has emulated twins of those kernels alone (build.py --emu-kernels).
    from hipindexer import catalog
    from tools.support import mutate
    for plant_set, keys in mutate.SET_KERNELS.items():
        assert plant_set in mutate.SET_TESTS, plant_set
        assert keys and all("gfx950" in catalog.KERNEL[k].targets for k in keys), (plant_set, keys)
    out = "E   hipindexer.runtime.hip.HipError: hipModuleLoadData failed: hipErrorInvalidImage (200)\n"
    with pytest.raises(SystemExit, match="outside the set's SET_KERNELS"):
        mutate._no_twin(subprocess.CompletedProcess([], 1, out, ""), "tests/emu/topk_cases.py")
    mutate._no_twin(subprocess.CompletedProcess([], 1, "FAILED x::y - AssertionError\n", ""), "a plant's catch")


def test_every_stage_variant_matches_its_kernel_source_exactly_once():
    from tools.measure import stage_variants as variants
    for vset, named in variants.VARIANTS.items():
        for name, subs in named.items():
            for sub in subs:
                text = (ROOT / "hsaco_src" / sub.file).read_text()
                assert text.count(sub.old) == 1, (vset, name, sub.name, text.count(sub.old))


def test_shipped_sources_carry_no_plant_hooks():
    """Plants are text substitutions on a copy (tools/support/mutate.py), never #ifdefs in what a wheel is built
    from."""
    hooks = [f"{f.relative_to(ROOT)}:{n}" for f in sorted((ROOT / "hsaco_src").rglob("*")) if f.is_file()
             for n, line in enumerate(f.read_text().splitlines(), 1) if "HX_PLANT" in line]
    assert not hooks, hooks


def test_background_runs_are_read_by_their_set_and_end_with_the_session(monkeypatch):
    # tests/mutation_runs.py over stand-in harnesses: a set's result is its own run's, a set nothing started runs
    # when asked, and stop() ends the runs still going (their process groups killed) and starts no more.
    import threading
    import time
    import mutation_runs as M
    monkeypatch.setattr(M, "_runs", {})
    monkeypatch.setattr(M, "_live", set())
    monkeypatch.setattr(M, "_stopped", threading.Event())
    monkeypatch.setattr(M, "RUNNERS", 2)
    monkeypatch.setattr(M, "_argv", lambda s: [sys.executable, "-c", "import time; time.sleep(60)"]
                        if s.startswith("slow") else [sys.executable, "-c", f"print('ran {s}')"])
    M.start(["a", "slow0", "slow1", "after"])  # both runners held by a slow set before "after" is taken
    assert M.result("a").stdout.strip() == "ran a"
    assert M.result("unstarted").stdout.strip() == "ran unstarted"
    while len(M._live) < 2:
        time.sleep(0.05)
    M.stop()
    assert M.result("slow0").returncode == -9 and M.result("slow1").returncode == -9
    with pytest.raises(RuntimeError, match="the session ended"):
        M.result("after")
