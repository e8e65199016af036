"""Plant builds small enough to take to a GPU machine, and whole again there.

A plant build (tools/support/mutate.py --build-only) is a package copy whose kernels/ folder is a whole build,
about 6 MB; a set of twenty plants and its unmodified build is more than one device call can take along. A plant
changes only the objects whose sources it touched, so the rest of each build is the checkout's own build, byte
for byte. `pack` keeps, per build, what differs from the checkout's kernels/ and the build's manifest; `unpack`, in
a checkout on the GPU machine whose kernels/ is the same build, puts each build back, filling in every object the
pack left out from the checkout's.

    python -m tools.support.plant_carry pack --builds build/plants/SET --out build/carry/SET
    python -m tools.support.plant_carry unpack --carry build/carry/SET --builds build/plants/SET   # GPU machine

then `python -m tools.support.mutate --suite cuda --set SET --builds build/plants/SET --prebuilt` there.
"""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "hipindexer" / "kernels"
BUILD_KERNELS = Path("pkg") / "hipindexer" / "kernels"  # a build's kernels/, under its folder


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(folder: Path) -> dict[Path, Path]:
    return {p.relative_to(folder): p for p in sorted(folder.rglob("*")) if p.is_file()}


def pack(builds: Path, out: Path, ref: Path = KERNELS) -> int:
    """Each build under `builds` into `out`, less the objects equal to `ref`'s: the bytes packed."""
    mine = {rel: _digest(p) for rel, p in _files(ref).items()}
    total = 0
    for build in sorted(d for d in Path(builds).iterdir() if (d / BUILD_KERNELS / "manifest.json").is_file()):
        for rel, p in _files(build / BUILD_KERNELS).items():
            if rel.name == "manifest.json" or mine.get(rel) != _digest(p):
                dst = Path(out) / build.name / BUILD_KERNELS / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(p, dst)
                total += p.stat().st_size
    return total


def unpack(carry: Path, builds: Path, ref: Path = KERNELS) -> int:
    """Each packed build under `carry` whole again under `builds`, the objects it left out taken from `ref`: the
    builds made. A build the pack holds no manifest for is refused: it was not packed from a build."""
    made = 0
    for packed in sorted(d for d in Path(carry).iterdir() if d.is_dir()):
        kernels = packed / BUILD_KERNELS
        if not (kernels / "manifest.json").is_file():
            raise click.ClickException(f"{packed}: no {BUILD_KERNELS / 'manifest.json'} (not made by pack)")
        dst = Path(builds) / packed.name / BUILD_KERNELS
        own = _files(kernels)
        for rel, p in _files(ref).items():
            if rel not in own:
                (dst / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(p, dst / rel)
        for rel, p in own.items():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, dst / rel)
        made += 1
    return made


@click.group()
def main() -> None:
    pass


@main.command("pack")
@click.option("--builds", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True)
def pack_cmd(builds: Path, out: Path) -> None:
    click.echo(f"{pack(builds, out) / 1e6:.1f} MB packed into {out}")


@main.command("unpack")
@click.option("--carry", type=click.Path(file_okay=False, exists=True, path_type=Path), required=True)
@click.option("--builds", type=click.Path(file_okay=False, path_type=Path), required=True)
def unpack_cmd(carry: Path, builds: Path) -> None:
    click.echo(f"{unpack(carry, builds)} builds made under {builds}")


if __name__ == "__main__":
    main()
