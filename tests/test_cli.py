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
    (["check", "prefill", "--device", "gpu0"], "--device: unknown device spec 'gpu0'"),
    (["bench", "prefill", "--device", "hip:x"], "--device: unknown device spec 'hip:x'"),
])
def test_usage_errors_exit_2_with_one_line_and_no_traceback(args, says):
    p = _run(*args)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert p.stderr.startswith("Error: ") and says in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""


def test_an_unknown_kernel_is_refused_before_any_ceiling_is_measured(monkeypatch):
    from hipindexer import bench, cli, runtime
    fake = type("FakeDevice", (), {"arch": "sm_90a", "num_cus": 132, "wave_size": 32, "backend": "cuda"})()
    monkeypatch.setattr(cli, "_device_or_exit", lambda spec: fake)
    monkeypatch.setattr(bench, "copy_bandwidth", lambda *a, **k: pytest.fail("measured a ceiling"))
    res = CliRunner().invoke(cli.main, ["bench", "prefill", "--kernel", "mqa_logits_mfma"])
    assert res.exit_code == 2 and "--kernel mqa_logits_mfma at H=64, D=128: kernel: 'mqa_logits_mfma' is not a " \
                                   "prefill kernel for sm_90a" in res.output, res.output
    assert runtime  # the runtime stays importable without a device


def test_every_device_option_has_help():
    from hipindexer import cli

    def walk(cmd):
        yield cmd
        for sub in getattr(cmd, "commands", {}).values():
            yield from walk(sub)
    opts = [p for c in walk(cli.main) for p in c.params if p.name == "device_spec"]
    assert opts and all(p.help and "emu:gfx950" in p.help for p in opts)


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
