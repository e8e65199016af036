"""The command line through click's CliRunner."""
import json

from click.testing import CliRunner

from hipindexer.cli import main


def test_check_quick_prints_a_pass_table():
    res = CliRunner().invoke(main, ["check", "--quick"])
    assert res.exit_code == 0, res.output
    assert "prefill" in res.output and "decode" in res.output
    assert "not applicable: prefill M7_N33" in res.output


def test_check_json_reports_every_case():
    res = CliRunner().invoke(main, ["check", "--quick", "--json"])
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert doc["summary"]["prefill"]["failed"] == 0
    assert doc["summary"]["prefill"]["run"] + doc["summary"]["prefill"]["not applicable"] == len(
        [c for c in doc["cases"] if c["op"] == "prefill"])
    assert doc["summary"]["decode"]["passed"] >= 8
