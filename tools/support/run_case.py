"""One named case of a tests/emu case module on the first GPU, in a process of its own, for a tool that wraps a
process (compute-sanitizer, a profiler). From the repository root:

    python -m tools.support.run_case paged_topk_fused_cases rows_of_every_kind_pass_the_gate_and_match_the_composed_path
    compute-sanitizer --tool racecheck python3 -m tools.support.run_case prefill_topk_cases fast_path_heads

The case runs as tests/test_*.py runs it on a GPU (its gates and asserts included); the module's CASES names what it
has.
"""
import importlib
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[2]


@click.command()
@click.argument("module")
@click.argument("case")
def main(module: str, case: str) -> None:
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "emu")]
    cases = importlib.import_module(module).CASES
    if case not in cases:
        raise click.BadParameter(f"{module} has no case {case!r}; its cases: {', '.join(sorted(cases))}",
                                 param_hint="CASE")
    from hipindexer.runtime import Device
    cases[case](Device())
    click.echo(f"case passed: {module} {case}")


if __name__ == "__main__":
    main()
