"""Launches that overlap the grid before them (programmatic dependent launch, sm_90a): every kernel built for
sm_90a waits for its predecessor before it touches memory, and a kernel started during a slow predecessor's run
still reads everything it wrote."""
import os
import re
from pathlib import Path

import numpy as np
import pytest
from host_backend import OverlappingHostBackend, registered

ROOT = Path(__file__).resolve().parents[1]
SM90A_SOURCES = [*sorted((ROOT / "hsaco_src" / "generic").glob("*.hip")),
                 *sorted((ROOT / "hsaco_src" / "sm90a").glob("*.hip"))]


def kernel_bodies(text):
    """(name, body text after its opening brace) of every HX_KERNEL in a source."""
    for m in re.finditer(r"^HX_KERNEL\b.*?\bvoid\s+(\w+)\s*\(", text, re.M):
        depth, k = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(text[k], 0)
            k += 1
        brace = text.index("{", k)
        yield m.group(1), text[brace + 1:]


def test_every_kernel_built_for_sm90a_waits_for_the_grid_before_it_first():
    seen = 0
    for src in SM90A_SOURCES:
        for name, body in kernel_bodies(src.read_text()):
            first = body.strip().split(";", 1)[0]
            assert first == "hx_grid_dependency_wait()", \
                f"{src.relative_to(ROOT)}: kernel {name} starts with {first!r}; launched to overlap the grid " \
                "before it, it must call hx_grid_dependency_wait() before anything else"
            seen += 1
    assert seen >= 20, f"found only {seen} kernels: the pattern no longer matches the sources"


def test_the_wait_check_finds_a_kernel_that_does_not_wait():
    text = "HX_KERNEL HX_LAUNCH_BOUNDS(64) void hx_k(\n    const HX_GRID_CONSTANT P p) {\n  p.dst[0] = 1;\n}\n"
    assert [(n, b.strip().split(";", 1)[0]) for n, b in kernel_bodies(text)] == [("hx_k", "p.dst[0] = 1")]


def test_launches_overlap_for_kernels_that_hold_an_sm_alone_unless_the_environment_says_otherwise(monkeypatch):
    from hipindexer.runtime import cuda as rcuda
    monkeypatch.delenv("HIPINDEXER_OVERLAP_LAUNCHES", raising=False)
    assert rcuda.CudaBackend().overlap_launches == "sole"
    for mode in ("0", "all"):
        monkeypatch.setenv("HIPINDEXER_OVERLAP_LAUNCHES", mode)
        assert rcuda.CudaBackend().overlap_launches == mode
    for bad in ("1", "off", ""):  # a mistyped mode is an error, never quietly the default
        monkeypatch.setenv("HIPINDEXER_OVERLAP_LAUNCHES", bad)
        with pytest.raises(ValueError, match="^HIPINDEXER_OVERLAP_LAUNCHES: expected one of sole, all, 0, got"):
            rcuda.CudaBackend()


HOPPER_SHARED_PER_SM = OverlappingHostBackend.SHARED_PER_SM


def test_a_kernel_holds_an_sm_alone_when_two_of_its_blocks_would_overflow_its_shared_memory():
    from hipindexer.runtime.module import holds_a_cu_alone
    half = HOPPER_SHARED_PER_SM // 2
    assert not holds_a_cu_alone({"dynamic_smem": half}, HOPPER_SHARED_PER_SM)
    assert holds_a_cu_alone({"dynamic_smem": half + 1}, HOPPER_SHARED_PER_SM)
    assert holds_a_cu_alone({"dynamic_smem": half, "resources": {"shared": 1}}, HOPPER_SHARED_PER_SM)
    assert not holds_a_cu_alone({"resources": {"shared": 4096}}, HOPPER_SHARED_PER_SM)
    assert not holds_a_cu_alone({}, HOPPER_SHARED_PER_SM)


def test_on_hopper_the_tensor_core_kernels_the_merge_and_the_rowwise_resident_and_cluster_top_k_launch_to_overlap_and_no_other():
    from hipindexer.runtime.module import DEFAULT_MANIFEST, holds_a_cu_alone
    if not DEFAULT_MANIFEST.is_file():
        pytest.skip(f"no built kernels: {DEFAULT_MANIFEST} is missing (run python build.py)")
    import json
    entries = [e for e in json.loads(DEFAULT_MANIFEST.read_text())["kernels"] if e["target"] == "sm_90a"]
    names = {e["name"] for e in entries}
    picked = {e["name"] for e in entries if holds_a_cu_alone(e, HOPPER_SHARED_PER_SM)}
    tensor_core = {n for n in names if n.endswith("_wgmma") or "_wgmma_" in n}  # not the test-only wgmma_peak
    assert len(tensor_core) >= 6 and {"fill_u32", "copy_u32x4", "prefill_topk_finish"} <= names
    assert picked == tensor_core | {"paged_topk_merge", "topk_rowwise", "topk_resident", "topk_resident_narrow",
                                     "topk_cluster"}, \
        f"picked to overlap: {sorted(picked)}; the small generic blocks started in a grid's tail pile onto the " \
        "SMs that came free first"


def test_a_kernel_loaded_on_a_backend_that_overlaps_takes_the_overlapping_launch_only_if_it_holds_an_sm_alone():
    from hipindexer.runtime.module import DEFAULT_MANIFEST, get_kernel
    if not DEFAULT_MANIFEST.is_file():
        pytest.skip(f"no built kernels: {DEFAULT_MANIFEST} is missing (run python build.py)")
    hb = OverlappingHostBackend()
    with registered(hb) as dev:
        for name, variant in (("paged_topk_merge", None), ("fill_u32", None), ("mqa_logits_wgmma", {"HX_HEADS": 64}),
                              ("prefill_topk_finish", None)):
            get_kernel(name, variant, device=dev).launch(1, stream=dev.default_stream)
        merge = get_kernel("paged_topk_merge", device=dev)
        merge.prepare(1)(dev.default_stream.handle)
        merge.prepare(1, overlap=False)(dev.default_stream.handle)  # asked for plain stream order
    assert [fn for fn, *_ in hb.launches] == ["hx_paged_topk_merge", "hx_fill_u32", "hx_mqa_logits_wgmma",
                                              "hx_prefill_topk_finish", "hx_paged_topk_merge", "hx_paged_topk_merge"]
    assert hb.overlapped == ["hx_paged_topk_merge", "hx_mqa_logits_wgmma", "hx_paged_topk_merge"]


@pytest.mark.gpu
@pytest.mark.parametrize("overlap", [True, False])
def test_a_kernel_started_during_a_slow_predecessor_reads_all_it_wrote(gpu_device, overlap):
    from hipindexer.runtime import Stream, zeros
    from hipindexer.runtime.module import DEFAULT_MANIFEST, get_kernel
    if not DEFAULT_MANIFEST.is_file():
        pytest.skip(f"no built kernels: {DEFAULT_MANIFEST} is missing (run python build.py)")
    backend = gpu_device._b
    if not hasattr(backend, "overlap_launches"):
        pytest.skip(f"the {gpu_device.backend} backend launches in plain stream order")
    was, backend.overlap_launches = backend.overlap_launches, "all" if overlap else "0"
    try:
        fill, copy = get_kernel("fill_u32", device=gpu_device), get_kernel("copy_u32x4", device=gpu_device)
        s = Stream(gpu_device)
        n, tail = 1 << 26, 1 << 18  # 256 MiB filled by 4 blocks: milliseconds; the copy reads the last 1 MiB
        big, out = zeros(n, np.uint32, stream=s), zeros(tail, np.uint32, stream=s)
        for round_, value in enumerate((0x5EED0001, 0x5EED0002)):
            out.fill(0, stream=s)
            fill.launch(4, dst=big, value=value, count=n, stream=s)
            copy.launch(256, dst=out, src=big.ptr + 4 * (n - tail), n16=tail // 4, stream=s)
            got = out.numpy(stream=s)
            bad = np.flatnonzero(got != value)
            assert bad.size == 0, f"round {round_}: the copy read {bad.size} of {tail} words before the fill " \
                                  f"wrote them (first at {bad[0]}: {got[bad[0]]:#x})"
    finally:
        backend.overlap_launches = was
