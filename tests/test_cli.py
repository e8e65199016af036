"""The command line through click's CliRunner."""
import json

import pytest


from click.testing import CliRunner

from hipindexer.cli import main


def test_check_quick_prints_a_pass_table():
    res = CliRunner().invoke(main, ["check", "--quick"])
    assert res.exit_code == 0, res.output
    assert "prefill" in res.output and "decode" in res.output
    assert "not applicable: 4 cases: cp: needs N % M == 0 and M even (--verbose lists them)" in res.output
    assert "M7_N33" not in res.output
    assert "max |out - ref| / A" in res.output and "reference" in res.output


def test_check_verbose_lists_each_case_that_does_not_apply():
    res = CliRunner().invoke(main, ["check", "--quick", "--verbose"])
    assert res.exit_code == 0, res.output
    assert "  prefill M7_N33_H1_D64_cp_clean (cp: needs N % M == 0 and M even (M=7, N=33))" in res.output


def test_check_json_reports_every_case():
    res = CliRunner().invoke(main, ["check", "--quick", "--json"])
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert doc["summary"]["prefill"]["failed"] == 0
    assert doc["summary"]["prefill"]["run"] + doc["summary"]["prefill"]["not applicable"] == len(
        [c for c in doc["cases"] if c["op"] == "prefill"])
    assert doc["summary"]["decode"]["passed"] >= 8
    assert 0 < doc["kernels"]["reference"]["max_err_over_a"] < 2.0 ** -20


def _run(*args):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "hipindexer.cli", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args,says", [
    (["check", "prefill", "--shapes", "64"], "'--shapes': expected comma-separated MxN pairs"),
    (["check", "prefill", "--heads", "abc"], "'--heads': expected comma-separated integers"),
    (["bench", "prefill", "--heads", "0"], "'--heads': expected integers >= 1"),
    (["bench", "prefill", "--split", "0"], "'--split': 0 is not in the range x>=1"),
    (["check", "prefill", "--device", "gpu0"], "--device: unknown device spec 'gpu0'"),
    (["bench", "prefill", "--device", "hip:x"], "--device: unknown device spec 'hip:x'"),
    (["check", "--seed", "-1"], "'--seed': -1 is not in the range x>=0"),
    (["check", "prefill", "--seed", "-1"], "'--seed': -1 is not in the range x>=0"),
    (["check", "decode", "--seed", "-1"], "'--seed': -1 is not in the range x>=0"),
    (["check", "cache", "--seed", "-1"], "'--seed': -1 is not in the range x>=0"),
    (["check", "decode", "--cases", "0"], "'--cases': 0 is not in the range x>=1"),
    (["check", "decode", "--max-context", "-1"], "'--max-context': -1 is not in the range x>=1"),
    (["check", "prefill", "--reruns", "-1"], "'--reruns': -1 is not in the range x>=0"),
    (["bench", "decode", "--next-n", "9"], "'--next-n': expected comma-separated next_n values, each 1..8 or ragged"),
    (["bench", "decode", "--next-n", "0,ragged"], "'--next-n': expected comma-separated next_n values"),
    (["bench", "decode", "--repeats", "0"], "'--repeats': 0 is not in the range x>=1"),
    (["bench", "topk", "--op", "both"], "'--op': 'both' is not one of"),
    (["bench", "topk", "--top-k", "0"], "'--top-k': 0 is not in the range 1<=x<=4096"),
    (["bench", "decode", "--rows", "equal:0x512"], "'--rows': expected SPREAD:BxCTX,..."),
])
def test_usage_errors_exit_2_with_one_line_and_no_traceback(args, says):
    p = _run(*args)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert p.stderr.startswith("Error: ") and says in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""


def _commands(cmd):
    yield cmd
    for sub in getattr(cmd, "commands", {}).values():
        yield from _commands(sub)


def test_every_int_option_states_its_range():
    """A bare int option takes -1 and 0 alike; every count, seed and size says what it accepts."""
    import click
    from hipindexer import cli
    bare = [f"{c.name} {p.opts[0]}" for c in _commands(cli.main) for p in c.params
            if isinstance(p.type, click.types.IntParamType) and not isinstance(p.type, click.IntRange)]
    assert not bare, bare


def test_bench_figures_never_round_a_measured_rate_to_zero():
    from hipindexer.bench.timing import figure
    assert [figure(x) for x in (3012.4, 45.6, 0.38, 0.0123, 0.0)] == ["3012", "46", "0.38", "0.012", "0"]
    assert figure(0.0071, ".1f") == "0.0071" and figure(12.34, ".2f") == "12.34"


def test_an_unknown_kernel_is_refused_before_any_ceiling_is_measured(monkeypatch):
    from hipindexer import cli, runtime
    from hipindexer.bench import timing as bench
    fake = type("FakeDevice", (), {"arch": "sm_90a", "num_cus": 132, "wave_size": 32, "backend": "cuda"})()
    monkeypatch.setattr(cli, "_device_or_exit", lambda spec: fake)
    monkeypatch.setattr(bench, "copy_bandwidth", lambda *a, **k: pytest.fail("measured a ceiling"))
    res = CliRunner().invoke(cli.main, ["bench", "prefill", "--kernel", "mqa_logits_mfma"])
    assert res.exit_code == 2 and "--kernel mqa_logits_mfma at H=64, D=128: kernel: 'mqa_logits_mfma' is not a " \
                                   "prefill kernel for sm_90a" in res.output, res.output
    assert runtime  # the runtime stays importable without a device


def test_every_device_option_has_help():
    from hipindexer import cli
    opts = [p for c in _commands(cli.main) for p in c.params if p.name == "device_spec"]
    assert opts and all(p.help and "emu:gfx950" in p.help for p in opts)


def test_fail_fast_stops_a_device_check_at_its_first_failed_case():
    """tools/support/mutate.py runs a planted build's suite with --fail-fast: one failed case catches a plant."""
    from hipindexer import cli
    from hipindexer.check.sweep import FAIL, PASS, Outcome
    statuses = [PASS, FAIL, PASS, FAIL]
    run = lambda s: Outcome("prefill", "case", s, "")  # noqa: E731
    assert [o.status for o in cli._run_cases(statuses, run, fail_fast=True)] == [PASS, FAIL]
    assert [o.status for o in cli._run_cases(statuses, run)] == statuses
    checks = [c for c in _commands(cli.main.commands["check"]) if any(p.name == "device_spec" for p in c.params)]
    assert {c.name for c in checks} == {"prefill", "decode", "topk", "cache"}
    assert all(any(p.name == "fail_fast" for p in c.params) for c in checks)


def test_no_gpu_says_how_to_use_the_emulator_when_it_is_built(monkeypatch, tmp_path):
    from hipindexer import cli
    from hipindexer.runtime import NoDeviceError, device, emu

    def no_gpu(cls, spec=None):
        raise NoDeviceError("no GPU found; looked for: nothing")
    monkeypatch.setattr(device.Device, "__new__", no_gpu)
    lib = tmp_path / "lib" / "libamdhip64.so"
    monkeypatch.setattr(emu, "library_path", lambda: lib)
    res = CliRunner().invoke(cli.main, ["check", "prefill"])
    assert res.exit_code == 3 and "emu:gfx950" not in res.output
    lib.parent.mkdir()
    lib.write_bytes(b"")
    res = CliRunner().invoke(cli.main, ["check", "prefill"])
    assert res.exit_code == 3 and "pass --device emu:gfx950" in res.output, res.output



def _fake_manifest(tmp_path, monkeypatch):
    """A manifest with one kernel of each kind, as the runtime's default, and no emulator probe."""
    from hipindexer.runtime import info, module
    entries = [
        {"name": "fill_u32", "symbol": "hx_fill_u32", "target": "sm_90a", "variant": {}, "variant_key": "fill_u32",
         "object": "sm_90a/fill_u32.cubin", "params": "FillParams", "param_size": 24, "block": 256, "dynamic_smem": 0,
         "resources": {"registers": 12, "shared": 0, "spill_stores": 0, "spill_loads": 0}},
        {"name": "mqa_logits_wgmma", "symbol": "hx_mqa_logits_wgmma", "target": "sm_90a", "variant": {"HX_HEADS": 64},
         "variant_key": "mqa_logits_wgmma.HX_HEADS-64", "object": "sm_90a/mqa_logits_wgmma.HX_HEADS-64.cubin",
         "params": "PrefillParams", "param_size": 104, "block": 640, "dynamic_smem": 204800,
         "resources": {"registers": 96, "shared": 0, "spill_stores": 0, "spill_loads": 0}},
        {"name": "mqa_logits_mfma", "symbol": "hx_mqa_logits_mfma", "target": "gfx950", "variant": {"HX_HEADS": 32},
         "variant_key": "mqa_logits_mfma.HX_HEADS-32", "object": "gfx950/mqa_logits_mfma.HX_HEADS-32.hsaco",
         "params": "PrefillParams", "param_size": 104, "block": 256, "dynamic_smem": 0,
         "resources": {"vgpr": 184, "agpr": 0, "sgpr": 71, "lds": 33792, "scratch": 0, "occupancy": 2}},
    ]
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"schema": 1, "kernels": entries, "toolchains": {}}))
    monkeypatch.setattr(module, "DEFAULT_MANIFEST", path)
    monkeypatch.setattr(info, "_emu_info", lambda: {"name": "emu", "available": False, "why_not": "not probed"})


def test_info_shows_dynamic_smem_and_accumulation_class(tmp_path, monkeypatch):
    _fake_manifest(tmp_path, monkeypatch)
    res = CliRunner().invoke(main, ["info"])
    assert res.exit_code == 0, res.output
    rows = {line.split()[1]: line.split() for line in res.output.splitlines() if line.startswith(("sm_90a ", "gfx950 "))}
    assert rows["fill_u32"][2:5] == ["24", "0", "-"]
    assert rows["mqa_logits_wgmma.HX_HEADS-64"][2:5] == ["104", "204800", "fp8_tc"]
    assert rows["mqa_logits_mfma.HX_HEADS-32"][2:5] == ["104", "0", "fp32"]
    assert "dynamic smem" in res.output and "accumulation" in res.output
    assert "fp32 (eps 2^-20), fp8_tc (eps 2^-12)" in res.output


def test_info_json_carries_the_same(tmp_path, monkeypatch):
    _fake_manifest(tmp_path, monkeypatch)
    res = CliRunner().invoke(main, ["info", "--json"])
    assert res.exit_code == 0, res.output
    m = json.loads(res.stdout)["manifest"]
    got = {k["variant_key"]: (k["dynamic_smem"], k["accumulation"]) for k in m["kernels"]}
    assert got == {"fill_u32": (0, None), "mqa_logits_wgmma.HX_HEADS-64": (204800, "fp8_tc"),
                   "mqa_logits_mfma.HX_HEADS-32": (0, "fp32")}
    assert m["accumulation_classes"] == {"fp32": 2.0 ** -20, "fp8_tc": 2.0 ** -12}


def test_info_prints_toolchains_as_text(tmp_path, monkeypatch):
    """One line per target: mode, path and version, or why it is missing; never a Python dict."""
    from hipindexer import cli
    _fake_manifest(tmp_path, monkeypatch)
    monkeypatch.setattr(cli, "_toolchains", lambda: {
        "gfx950": {"mode": "clang", "path": "python -m ziglang clang", "version": "clang version 22"},
        "sm_90a": {"missing": "no NVIDIA toolchain for sm_90a: looked for $NVCC"}})
    res = CliRunner().invoke(main, ["info"])
    lines = [line for line in res.output.splitlines() if line.startswith("toolchain")]
    assert lines == ["toolchain gfx950: clang, python -m ziglang clang, clang version 22",
                     "toolchain sm_90a: missing: no NVIDIA toolchain for sm_90a: looked for $NVCC"]


def test_info_of_the_real_toolchains_has_one_readable_line_per_target(tmp_path, monkeypatch):
    _fake_manifest(tmp_path, monkeypatch)
    res = CliRunner().invoke(main, ["info"])
    lines = [line for line in res.output.splitlines() if line.startswith("toolchain")]
    assert [line.split(":")[0] for line in lines] == ["toolchain gfx950", "toolchain sm_90a"]
    assert not any("{" in line for line in lines), lines


def test_info_lists_no_test_only_kernel():
    """The user's listing is the shipped kernels: the test-only ones live in their own manifest."""
    from hipindexer import catalog
    from hipindexer.runtime.module import DEFAULT_MANIFEST
    if not DEFAULT_MANIFEST.is_file():
        pytest.skip(f"no built kernels at {DEFAULT_MANIFEST} (python build.py)")
    res = CliRunner().invoke(main, ["info", "--json"])
    assert res.exit_code == 0, res.output
    listed = {k["name"] for k in json.loads(res.stdout)["manifest"]["kernels"]}
    assert listed and not listed & {k.key for k in catalog.KERNELS if k.test_only}, listed
    assert {"fill_u32", "copy_u32x4"} <= listed


def test_build_command_runs_the_checkout_s_build_py():
    """`hipindexer build` loads build.py by path, and build.py finds its hxbuild modules beside it."""
    from hipindexer.runtime.module import DEFAULT_MANIFEST
    if not DEFAULT_MANIFEST.is_file():
        pytest.skip(f"no built kernels at {DEFAULT_MANIFEST} (python build.py)")
    res = CliRunner().invoke(main, ["build", "--check", "--no-emu"])
    assert res.exit_code in (0, 1), res.output
    assert "current" in res.output or "stale:" in res.output, res.output


def test_checkout_commands_outside_a_checkout_say_they_need_one(tmp_path):
    """The package with no source checkout around it, as a wheel installs it: `info --isa` (tools/ and
    hsaco_src/) and `build` (build.py and hsaco_src/) say so, and why, instead of failing on an import."""
    from tools.support.package_copy import PackageCopy
    pkg = PackageCopy(tmp_path).refresh()
    isa = pkg.run(["-m", "hipindexer.cli", "info", "--isa"], timeout=120)
    assert isa.returncode == 1, isa.stdout + isa.stderr
    assert "needs a source checkout" in isa.stderr and "recompiles each gfx950 kernel" in isa.stderr, isa.stderr
    built = pkg.run(["-m", "hipindexer.cli", "build", "--check"], timeout=120)
    assert built.returncode == 1 and "needs a source checkout" in built.stderr, built.stderr
