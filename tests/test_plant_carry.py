"""tools/support/plant_carry.py: plant builds packed to what differs from the checkout's build, and put back whole."""
from pathlib import Path

import click
import pytest

from tools.support.plant_carry import BUILD_KERNELS, pack, unpack


def _tree(folder: Path, files: dict) -> None:
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)


def _read(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


CHECKOUT = {"manifest.json": b"{m}", "sm_90a/a.cubin": b"A", "sm_90a/b.cubin": b"B", "gfx950/c.hsaco": b"C"}


def test_a_packed_plant_keeps_only_what_it_changed_and_unpacks_to_the_whole_build(tmp_path):
    ref = tmp_path / "ref"
    _tree(ref, CHECKOUT)
    builds = tmp_path / "plants"
    planted = {**CHECKOUT, "manifest.json": b"{p}", "sm_90a/b.cubin": b"B planted"}
    _tree(builds / "clean" / BUILD_KERNELS, CHECKOUT)
    _tree(builds / "one_late" / BUILD_KERNELS, planted)
    (builds / "one_late" / "src").mkdir()  # the plant's sources stay behind

    packed = pack(builds, tmp_path / "carry", ref)
    assert packed == len(b"{m}") + len(b"{p}") + len(b"B planted")
    assert _read(tmp_path / "carry" / "clean" / BUILD_KERNELS) == {"manifest.json": b"{m}"}
    assert _read(tmp_path / "carry" / "one_late" / BUILD_KERNELS) == {"manifest.json": b"{p}",
                                                                     "sm_90a/b.cubin": b"B planted"}

    assert unpack(tmp_path / "carry", tmp_path / "again", ref) == 2
    assert _read(tmp_path / "again" / "clean" / BUILD_KERNELS) == CHECKOUT
    assert _read(tmp_path / "again" / "one_late" / BUILD_KERNELS) == planted


def test_unpack_refuses_a_folder_pack_did_not_make(tmp_path):
    ref = tmp_path / "ref"
    _tree(ref, CHECKOUT)
    (tmp_path / "carry" / "stray").mkdir(parents=True)
    with pytest.raises(click.ClickException, match="not made by pack"):
        unpack(tmp_path / "carry", tmp_path / "again", ref)
