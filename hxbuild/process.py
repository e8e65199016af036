"""Running a compiler or tool, and the errors a build reports."""

from __future__ import annotations

import subprocess


class BuildError(RuntimeError):
    pass


class ToolchainError(BuildError):
    pass


def run(argv, env=None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, env=env)
    except OSError as e:
        raise BuildError(f"cannot run {argv[0]}: {e}") from None


def version_line(argv, env=None) -> str:
    """The first non-empty line `argv --version` prints."""
    p = run(argv + ["--version"], env)
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
    return lines[0].strip() if lines else "unknown"
