"""hipindexer.topk_logits' cluster path (sm_90a: a row's keys cut among a cluster's blocks): the cases of
tests/emu/topk_cases.py and rows as long as a decode step's on a real sm_90a GPU (skipped elsewhere; the emulator has
no clusters), against the reference and bit for bit against the single-block kernel; and the launch it makes, over
a backend that runs no kernel."""
import numpy as np
import pytest

import topk_cases as C
from hipindexer import catalog, topk_logits
from hipindexer.ops.launch import target_of
from hipindexer.runtime import DeviceArray
from test_topk_logits import TOPK, agrees_with_the_single_block_kernel


@pytest.fixture
def sm90a_device(gpu_device):
    if target_of(gpu_device).arch != "sm_90a":
        pytest.skip("the cluster path is sm_90a's")
    return gpu_device


@pytest.mark.gpu
@pytest.mark.parametrize("rows, N", [(4, 1 << 13), (16, 1 << 15), (64, 1 << 17), (300, 12289), (3, 200003)])
@pytest.mark.parametrize("sorted", [False, True], ids=["unsorted", "sorted"])
def test_cluster_rows_on_the_gpu(sm90a_device, rows, N, sorted):
    """Rows cut among a cluster's blocks (a decode step's; more rows than the device holds clusters at once; an odd
    length whose rows start at every alignment and whose parts end mid-float4)."""
    agrees_with_the_single_block_kernel(sm90a_device, rows, N, sorted, {"cluster": True})


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(C.CASES))
def test_topk_cases_on_the_cluster_path(sm90a_device, name):
    C.run_case(sm90a_device, name, "cluster")


def test_cluster_true_takes_one_launch_of_whole_clusters_with_the_shared_memory_a_part_needs(hopper):
    """cluster=True: one launch of the cluster kernel, CLUSTER blocks a row (a grid of whole clusters), a block's
    part of the keys (and, sorted, the sort's room) as its dynamic shared memory, no workspace; with another path's
    tunable, or where no build has clusters, it raises naming it."""
    from hipindexer.plan import TARGETS, plan_topk
    from hipindexer.plan.topk import CLUSTER, cluster_slots, cluster_smem
    hb, dev = hopper
    rows, N, top_k = 3, 8192, 2048
    logits = DeviceArray.empty((rows, N), np.float32, dev)
    out = DeviceArray.empty((rows, top_k), np.int32, dev)
    assert CLUSTER == 8 and cluster_slots(N) == 257  # (8192 + 4) / 4 float4 slots, an eighth of them rounded up
    for sorted, smem in ((False, 16 * 257), (True, 16 * 257 + 8 * top_k)):
        assert cluster_smem(N, top_k, sorted) == smem
        n0 = len(hb.launches)
        topk_logits(logits, top_k, out=out, sorted=sorted, cluster=True)
        (fn, grid, block, _, raw), = hb.launches[n0:]
        assert (fn, grid[0], block[0], hb.shared[-1]) == ("hx_topk_cluster", CLUSTER * rows,
                                                           catalog.KERNEL["topk_cluster"].block, smem)
        f = TOPK.ctype().from_buffer_copy(raw)
        assert (f.rows, f.N, f.top_k, f.sorted, f.logits, f.indices) == (rows, N, top_k, sorted, logits.ptr, out.ptr)
    with pytest.raises(ValueError, match=r"^cluster=True: the cluster path takes none of \['resident'\]"):
        topk_logits(logits, top_k, out=out, cluster=True, resident=True)
    with pytest.raises(ValueError, match="^cluster: expected a bool"):
        topk_logits(logits, top_k, out=out, cluster=1)
    with pytest.raises(ValueError, match="^cluster=True: no cluster path for rows of 8192 columns at top_k 2048 on "
                                         "gfx950"):
        plan_topk(rows, N, top_k, TARGETS["gfx950"], cluster=True)
    assert not plan_topk(rows, N, top_k, TARGETS["gfx950"]).cluster
    many = plan_topk(1 << 20, N, top_k, TARGETS["sm_90a"], cluster=True)
    assert many.grid_rows == 1 << 16 and many.grid_rows % CLUSTER == 0




def test_few_long_rows_take_the_cluster_path_by_default_and_nothing_else_does():
    """By default the cluster path takes rows of at least CLUSTER_MIN_N columns whose clusters all fit the device at
    once (sorted, or blocks that hold a unit alone: half of it), where its fit prices it below the other paths; more
    rows, shorter rows, any other path's tunable, cluster=False and a gfx950 device keep it out."""
    from hipindexer.plan import TARGETS, plan_topk
    from hipindexer.plan.topk import CLUSTER, CLUSTER_MIN_N, cluster_pays
    hopper, top_k = TARGETS["sm_90a"], 2048
    most = hopper.num_cus // CLUSTER
    for rows, N, sorted in ((1, 1 << 16, False), (8, 1 << 15, False), (most, 1 << 16, False), (8, 1 << 17, True),
                            (2, 1 << 18, False), (most // 2, 1 << 18, True)):
        p = plan_topk(rows, N, top_k, hopper, sorted=sorted)
        assert p.cluster and p.grid_rows == CLUSTER * rows and cluster_pays(rows, N, top_k, sorted, hopper)
    assert not plan_topk(most, 1 << 16, top_k, hopper, sorted=True).cluster  # sorted: half the units at most
    assert not plan_topk(most + 1, 1 << 16, top_k, hopper).cluster
    assert not plan_topk(most // 2 + 1, 1 << 18, top_k, hopper).cluster  # a block a unit: half the units at most
    assert not plan_topk(8, CLUSTER_MIN_N - 4, top_k, hopper).cluster
    for tunable in ({"cluster": False}, {"split": True}, {"rowwise": True}, {"cap": 8192}):
        assert not plan_topk(8, 1 << 16, top_k, hopper, **tunable).cluster
    assert not plan_topk(8, 1 << 16, top_k, TARGETS["gfx950"]).cluster
    assert plan_topk(4, 1 << 13, top_k, hopper).resident  # rows a block holds stay on the resident path


def test_the_planners_own_shared_memory_of_the_resident_and_cluster_blocks_covers_their_builds():
    """plan.topk counts a block's own shared memory (its counts and sums, beside the dynamic) to decide whether two
    blocks share a unit (resident_narrow, cluster_alone): the sm_90a builds must need no more than it counts."""
    from hipindexer.plan.topk import CLUSTER_STATIC_BYTES, RESIDENT_STATIC_BYTES
    from hipindexer.runtime.module import load_manifest
    try:
        manifest = load_manifest()
    except FileNotFoundError:
        pytest.skip("no built kernels")
    counted = {"topk_resident": RESIDENT_STATIC_BYTES, "topk_resident_narrow": RESIDENT_STATIC_BYTES,
               "topk_cluster": CLUSTER_STATIC_BYTES}
    built = {e["name"]: e["resources"]["shared"] for e in manifest.entries
             if e["target"] == "sm_90a" and e["name"] in counted}
    if not built:
        pytest.skip("the manifest has no sm_90a build")
    assert built.keys() == counted.keys(), built
    for name, shared in built.items():
        assert shared <= counted[name], (name, shared, counted[name])
