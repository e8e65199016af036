"""The command line through click's CliRunner."""
import json

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
