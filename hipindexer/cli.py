"""The hipindexer command line: JSON or tables to stdout, progress to stderr.

Exit codes: 0 success, 1 a failed check, 2 usage, 3 a command needs a GPU and there is none.
"""
from __future__ import annotations

import json
import sys

import click
import numpy as np

NO_GPU_EXIT = 3


def _progress(msg: str) -> None:
    click.echo(msg, err=True)


def _table(rows: list[list], header: list[str]) -> str:
    cols = [header] + [[str(x) for x in r] for r in rows]
    widths = [max(len(r[i]) for r in cols) for i in range(len(header))]
    fmt = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths))  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in cols[1:]])


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="hipindexer")
def main() -> None:
    """Lightning-indexer kernels: fp8 MQA logits for prefill and paged decode."""


@main.command()
@click.option("--quick", is_flag=True, help="The small sweep (CI size).")
@click.option("--seed", default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcomes as JSON.")
def check(quick: bool, seed: int, as_json: bool) -> None:
    """Check the numpy reference against per-element float64 formulations of both ops."""
    from .sweep import FAIL, reference_cases, tally
    rng = np.random.default_rng(seed)
    cases = list(reference_cases(quick))
    outcomes = []
    for i, case in enumerate(cases):
        o = case(rng)
        outcomes.append(o)
        if o.status == FAIL:
            _progress(f"FAIL {o.op} {o.case}: {o.message}")
        elif (i + 1) % 20 == 0 or i + 1 == len(cases):
            _progress(f"[{i + 1}/{len(cases)}]")
    by_op = {}
    for o in outcomes:
        by_op.setdefault(o.op, []).append(o)
    summary = {op: tally(os) for op, os in by_op.items()}
    if as_json:
        click.echo(json.dumps({"summary": summary, "cases": [o.__dict__ for o in outcomes]}, indent=1))
    else:
        rows = [[op, t["run"], t["passed"], t["failed"], t["not applicable"]] for op, t in summary.items()]
        click.echo(_table(rows, ["op", "run", "passed", "failed", "not applicable"]))
        for o in outcomes:
            if o.status == "not applicable":
                click.echo(f"not applicable: {o.op} {o.case} ({o.message})")
    if any(t["failed"] for t in summary.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
