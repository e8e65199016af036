"""hipindexer.topk_logits: the cases of tests/emu/topk_cases.py on the emulated MI355X (a child pytest whose HIP
is the emulator, on the tests' gfx950 build) and, marked gpu, on a real GPU, with rows there as long as a
decode step's (skipped without a GPU); and the op's host side over a backend that runs no kernel."""
import numpy as np
import pytest

import emu_harness as H
import topk_cases as C
from hipindexer import catalog, topk_logits
from hipindexer.ops import topk
from hipindexer.runtime import DeviceArray


@pytest.mark.toolchain
@pytest.mark.mutation("topk")
def test_topk_cases_pass_on_the_emulator_and_every_topk_plant_fails_them(emu_kernels):
    H.assert_cases_pass_and_every_plant_fails_them("topk", len(C.CASES) * len(C.PATHS))


@pytest.mark.gpu
@pytest.mark.parametrize("path", list(C.PATHS))
@pytest.mark.parametrize("name", list(C.CASES))
def test_topk_cases_on_the_gpu(gpu_device, name, path):
    C.run_case(gpu_device, name, path)


@pytest.mark.gpu
@pytest.mark.parametrize("top_k", [512, 2048, 4096])
@pytest.mark.parametrize("sorted", [False, True], ids=["unsorted", "sorted"])
def test_long_rows_on_the_gpu(gpu_device, top_k, sorted):
    """64 rows of 131,072 logits, a fifth of them -inf, some rows with ties at the cut; and with lengths."""
    rng = np.random.default_rng(top_k + sorted)
    x = rng.standard_normal((64, 1 << 17), dtype=np.float32)
    x[rng.random(x.shape) < 0.2] = -np.inf
    x[::4] = np.round(x[::4] * 4) / 4
    C.check(gpu_device, x, top_k, sorted)
    lengths = rng.integers(0, (1 << 17) + 100, 64).astype(np.int32)
    C.check(gpu_device, x, top_k, sorted, lengths=lengths)


@pytest.mark.gpu
@pytest.mark.parametrize("rows, N", [(64, 1 << 17), (128, 1 << 15), (128, 1 << 17), (512, 1 << 17)])
@pytest.mark.parametrize("sorted", [False, True], ids=["unsorted", "sorted"])
@pytest.mark.parametrize("path", [{"split": True}, {"rowwise": True}, {"rowwise": True, "held": False}],
                         ids=["split", "rowwise", "rowwise_floor"])
def test_long_row_paths_on_the_gpu(gpu_device, rows, N, sorted, path):
    """The benchmark's shapes (half of each row -inf, top_k 2048) on the split and the row-wise path, against the
    reference and bit for bit against the single-block kernel; then rows of few distinct values, whose candidates
    overflow the split path's workspace and the row-wise buffer (cut mid-row)."""
    from hipindexer.plan import plan_topk
    from hipindexer.plan.topk import rowwise_pays
    from hipindexer.ops.launch import target_of
    plan = plan_topk(rows, N, 2048, target_of(gpu_device))
    assert plan.resident or (plan.rowwise == rowwise_pays(rows, N, target_of(gpu_device).num_cus)
                             and plan.split == (not plan.rowwise))
    agrees_with_the_single_block_kernel(gpu_device, rows, N, sorted, path)


@pytest.mark.gpu
@pytest.mark.parametrize("rows, N", [(4, 1 << 13), (128, 1 << 15), (300, 12289)])
@pytest.mark.parametrize("sorted", [False, True], ids=["unsorted", "sorted"])
@pytest.mark.parametrize("narrow", [False, True], ids=["wide", "narrow"])
def test_resident_rows_on_the_gpu(gpu_device, rows, N, sorted, narrow):
    """Rows a resident block holds (a decode step's, and an odd length whose rows start at every alignment), on
    either build of the block, as test_long_row_paths_on_the_gpu checks the other paths."""
    agrees_with_the_single_block_kernel(gpu_device, rows, N, sorted, {"resident": True, "narrow": narrow})


def agrees_with_the_single_block_kernel(gpu_device, rows, N, sorted, path):
    rng = np.random.default_rng(rows + N + sorted)
    x = rng.standard_normal((rows, N), dtype=np.float32)
    x[rng.random(x.shape) < 0.5] = -np.inf
    got = C.run_with(gpu_device, path, x, 2048, sorted)
    C.expect_exact(*got, x, 2048, sorted)
    single = C.run_with(gpu_device, {"split": False}, x, 2048, sorted)
    assert (got[0] == single[0]).all() and (got[1].view(np.uint32) == single[1].view(np.uint32)).all()
    x[: rows // 2] = np.round(x[: rows // 2])  # a handful of values: a cut digit holding thousands of keys
    got = C.run_with(gpu_device, path, x, 2048, sorted)
    C.expect_exact(*got, x, 2048, sorted)


# ------------------------------------------------------------------ the host side, over a backend that runs no kernel

TOPK = catalog.STRUCT["TopkParams"]



def sent(hb):
    """(symbol, grid, block, the TopkParams fields) of the backend's last launch."""
    fn, grid, block, _, raw = hb.launches[-1]
    p = TOPK.ctype().from_buffer_copy(raw)
    return fn, grid, block, {f: getattr(p, f) for f, _ in TOPK.fields}


def test_every_check_runs_before_anything_is_copied(hopper):
    hb, dev = hopper
    x = np.zeros((3, 40), np.float32)
    for kw, error in [(dict(top_k=0), ValueError), (dict(logits=x.astype(np.float16)), TypeError),
                      (dict(lengths=np.array([1, 2], np.int32)), ValueError),
                      (dict(lengths=np.array([1, 2, -1], np.int32)), ValueError),
                      (dict(out=DeviceArray.empty((3, 4), np.int32, dev)), ValueError),
                      (dict(values=DeviceArray.empty((3, 5), np.float32, dev)), ValueError),
                      (dict(return_values=1), TypeError)]:
        with pytest.raises(error):
            topk_logits(**{"logits": x, "top_k": 5, "device": dev, **kw})
    assert hb.htod == 0 and not hb.launches


def test_each_launch_sends_what_its_call_asked_for(hopper, monkeypatch):
    hb, dev = hopper
    rows, N, top_k = 5, 300, 16
    wide = DeviceArray.empty((rows, N + 20), np.float32, dev)
    out = DeviceArray.empty((rows, top_k + 3), np.int32, dev)[:, :top_k]
    values = DeviceArray.empty((rows, top_k + 7), np.float32, dev)[:, :top_k]
    lengths = DeviceArray.from_numpy(np.full(rows, 7, np.int32), dev)
    topk_logits(wide[:, :N], top_k, lengths=lengths, sorted=True, return_values=True, out=out, values=values,
                split=False)
    fn, grid, block, p = sent(hb)
    assert fn == "hx_topk_logits" and grid[0] == rows and block[0] == catalog.KERNEL["topk_logits"].block
    assert (p["logits_stride"], p["indices_stride"], p["values_stride"]) == (N + 20, top_k + 3, top_k + 7)
    assert (p["rows"], p["N"], p["top_k"], p["sorted"]) == (rows, N, top_k, 1)
    assert (p["logits"], p["lengths"], p["indices"], p["values"]) == (wide.ptr, lengths.ptr, out.ptr, values.ptr)
    monkeypatch.setattr(topk, "MAX_BLOCKS", 2)
    idx = topk_logits(np.zeros((rows, N), np.float32), top_k, device=dev, split=False)
    fn, grid, block, p = sent(hb)
    assert grid[0] == 2 and p["rows"] == rows and p["lengths"] == 0 and p["values"] == 0 and p["sorted"] == 0
    assert p["indices"] == idx.ptr and p["indices_stride"] == top_k and p["logits_stride"] == N


def test_a_prepared_call_copies_and_allocates_nothing_and_options_key_their_launch(hopper):
    hb, dev = hopper
    logits = DeviceArray.from_numpy(np.zeros((4, 100), np.float32), dev)
    out = DeviceArray.empty((4, 8), np.int32, dev)
    values = DeviceArray.empty((4, 8), np.float32, dev)
    for sorted in (False, True):
        topk_logits(logits, 8, sorted=sorted, return_values=True, out=out, values=values, split=False)
    copies, buffers = hb.htod, len(hb.bufs)
    for sorted in (False, True, False):
        got = topk_logits(logits, 8, sorted=sorted, return_values=True, out=out, values=values, split=False)
        assert got == (out, values) and sent(hb)[3]["sorted"] == int(sorted)
    assert hb.htod == copies and len(hb.bufs) == buffers and len(hb.launches) == 5


SPLIT = catalog.STRUCT["TopkSplitParams"]


def test_long_rows_launch_the_split_path_over_one_workspace(hopper):
    """64 x 131072 on an H200's 132 units: kernel 2 on rows x parts blocks, kernels 1 and 3 on one per row, all
    with the plan's cut and floor rank and one workspace, allocated once and reused by prepared calls."""
    from hipindexer.plan import plan_topk
    from hipindexer.plan.topk import workspace_bytes
    hb, dev = hopper
    rows, N, top_k = 64, 1 << 17, 2048
    logits = DeviceArray.empty((rows, N), np.float32, dev)
    out = DeviceArray.empty((rows, top_k), np.int32, dev)
    plan = plan_topk(rows, N, top_k, topk.target_of(dev), split=True)
    assert plan.split and plan.parts * plan.part_len >= N > (plan.parts - 1) * plan.part_len
    topk_logits(logits, top_k, out=out, sorted=True, split=True)
    sent3 = hb.launches[-3:]
    assert [s[0] for s in sent3] == ["hx_topk_split_floor", "hx_topk_split_gather", "hx_topk_split_finish"]
    assert [s[1][0] for s in sent3] == [rows, rows * plan.parts, rows]
    assert [s[2][0] for s in sent3] == [catalog.KERNEL[k].block for k in topk.SPLIT_KERNELS]
    fields = [SPLIT.ctype().from_buffer_copy(s[4]) for s in sent3]
    assert len({f.work for f in fields}) == 1 and fields[0].work != 0
    f = fields[0]
    assert (f.parts, f.part_len, f.cap, f.row_bytes, f.rows, f.N, f.top_k, f.sorted, f.step, f.r) == \
        (plan.parts, plan.part_len, plan.cap, plan.row_bytes, rows, N, top_k, 1, 16, 224)
    assert workspace_bytes(rows, top_k) == rows * plan.row_bytes
    copies, buffers = hb.htod, len(hb.bufs)
    for _ in range(3):
        topk_logits(logits, top_k, out=out, sorted=True, split=True)
        assert SPLIT.ctype().from_buffer_copy(hb.launches[-1][4]).work == f.work
    assert hb.htod == copies and len(hb.bufs) == buffers
    with pytest.raises(ValueError, match="^workspace"):
        topk_logits(logits, top_k, out=out, workspace=DeviceArray.empty((100,), np.uint8, dev), split=True)
    with pytest.raises(TypeError, match="tunable"):
        topk_logits(logits, top_k, out=out, parts=3)


def test_few_long_rows_take_one_rowwise_launch_and_no_workspace(hopper):
    """128 x 32768 by default: one launch of a block a row, the whole row one part, no workspace, the split path's
    floor sample and rank; a prepared call copies and allocates nothing; rowwise=True with a split tunable raises."""
    from hipindexer.plan import plan_topk
    hb, dev = hopper
    rows, N, top_k = 128, 1 << 15, 2048
    logits = DeviceArray.empty((rows, N), np.float32, dev)
    out = DeviceArray.empty((rows, top_k), np.int32, dev)
    assert plan_topk(rows, N, top_k, topk.target_of(dev)).rowwise
    n0 = len(hb.launches)
    topk_logits(logits, top_k, out=out)
    (fn, grid, block, _, raw), = hb.launches[n0:]
    assert (fn, grid[0], block[0]) == ("hx_topk_rowwise", rows, catalog.KERNEL["topk_rowwise"].block)
    f = SPLIT.ctype().from_buffer_copy(raw)
    assert (f.work, f.parts, f.part_len, f.rows, f.N, f.top_k, f.sorted, f.step, f.r, f.held) == \
        (0, 1, N, rows, N, top_k, 0, 16, 224, 4)
    copies, buffers = hb.htod, len(hb.bufs)
    topk_logits(logits, top_k, out=out)
    assert hb.htod == copies and len(hb.bufs) == buffers and len(hb.launches) == n0 + 2
    topk_logits(logits, top_k, out=out, rowwise=True, held=False)
    assert SPLIT.ctype().from_buffer_copy(hb.launches[-1][4]).held == 0
    with pytest.raises(ValueError, match="^rowwise"):
        topk_logits(logits, top_k, out=out, rowwise=True, split=True)
    with pytest.raises(ValueError, match="^held"):
        topk_logits(logits, top_k, out=out, split=True, held=True)
    with pytest.raises(ValueError, match="^held"):
        topk_logits(logits, top_k, out=out, rowwise=True, held=1)


def test_rows_a_block_holds_take_one_resident_launch_with_the_shared_memory_they_need(hopper):
    """4 x 8192 by default: one launch of the resident kernel, a block a row, no workspace, the keys' room (and,
    sorted, the sort's) as its dynamic shared memory; a prepared call copies and allocates nothing; resident=True
    with another path's tunable, or for rows past a block's shared memory, raises naming it."""
    from hipindexer.plan import plan_topk
    from hipindexer.plan.topk import resident_smem
    hb, dev = hopper
    rows, N, top_k = 4, 8192, 2048
    logits = DeviceArray.empty((rows, N), np.float32, dev)
    out = DeviceArray.empty((rows, top_k), np.int32, dev)
    assert plan_topk(rows, N, top_k, topk.target_of(dev)).resident
    for sorted, smem in ((False, 4 * (N + 4)), (True, 4 * (N + 4) + 8 * top_k)):
        assert resident_smem(N, top_k, sorted) == smem
        n0 = len(hb.launches)
        topk_logits(logits, top_k, out=out, sorted=sorted)
        (fn, grid, block, _, raw), = hb.launches[n0:]
        assert (fn, grid[0], block[0], hb.shared[-1]) == ("hx_topk_resident", rows,
                                                           catalog.KERNEL["topk_resident"].block, smem)
        f = TOPK.ctype().from_buffer_copy(raw)
        assert (f.rows, f.N, f.top_k, f.sorted, f.logits, f.indices) == (rows, N, top_k, sorted, logits.ptr, out.ptr)
    copies, buffers, n0 = hb.htod, len(hb.bufs), len(hb.launches)
    topk_logits(logits, top_k, out=out)
    assert hb.htod == copies and len(hb.bufs) == buffers and len(hb.launches) == n0 + 1
    with pytest.raises(ValueError, match="^resident=True: the resident path takes none of"):
        topk_logits(logits, top_k, out=out, resident=True, rowwise=True)
    wide = DeviceArray.empty((1, 1 << 16), np.float32, dev)
    with pytest.raises(ValueError, match="^resident=True: rows of 65536 columns"):
        topk_logits(wide, top_k, out=DeviceArray.empty((1, top_k), np.int32, dev), resident=True)
    with pytest.raises(ValueError, match="^resident: expected a bool"):
        topk_logits(logits, top_k, out=out, resident=1)
    with pytest.raises(ValueError, match="^narrow: expected a bool"):
        topk_logits(logits, top_k, out=out, resident=True, narrow=1)
    with pytest.raises(ValueError, match="^narrow=True: only the resident path"):
        topk_logits(logits, top_k, out=out, rowwise=True, narrow=True)
    n0 = len(hb.launches)
    topk_logits(logits, top_k, out=out, narrow=True)
    (fn, grid, block, _, _), = hb.launches[n0:]
    assert (fn, grid[0], block[0]) == ("hx_topk_resident", rows, catalog.KERNEL["topk_resident_narrow"].block) \
        and block[0] < catalog.KERNEL["topk_resident"].block


def test_the_resident_path_takes_the_narrow_block_for_more_rows_than_units_where_two_fit_a_unit():
    """Two 512-thread blocks a unit for rows past the units where two fit a unit's shared memory; the 1,024-thread
    block for a row or less a unit, and for rows whose two blocks overflow a unit's shared memory (32,768 columns)."""
    from hipindexer.plan import TARGETS, plan_topk
    from hipindexer.plan.topk import resident_narrow
    hopper = TARGETS["sm_90a"]
    for rows, N, narrow in ((1024, 8192, True), (1024, 16384, True), (133, 8192, True), (132, 8192, False),
                            (4, 8192, False), (300, 32768, False)):
        assert resident_narrow(rows, N, 2048, hopper) == narrow, (rows, N)
        p = plan_topk(rows, N, 2048, hopper, resident=True)
        assert p.resident and p.narrow == narrow, (rows, N, p)
    assert plan_topk(1024, 8192, 2048, hopper).narrow
    assert not plan_topk(1024, 8192, 2048, hopper, resident=True, narrow=False).narrow
    assert plan_topk(4, 8192, 2048, hopper, resident=True, narrow=True).narrow


def test_the_planners_held_columns_are_the_row_wise_kernels():
    """plan.topk.HELD_COLUMNS: the tiles the row-wise kernel holds (ROWWISE_HELD_TILES) of its block's float4 loads
    (HX_SPLIT_VEC a thread), 4 columns each."""
    import re
    from pathlib import Path
    from hipindexer.plan import topk as plan
    src = Path(__file__).resolve().parents[1] / "hsaco_src"
    tiles = int(re.search(r"#define ROWWISE_HELD_TILES (\d+)", (src / "generic/topk_rowwise.hip").read_text())[1])
    vec = int(re.search(r"#define HX_SPLIT_VEC (\d+)", (src / "common/topk_split.h").read_text())[1])
    assert tiles == plan.HELD_TILES
    assert plan.HELD_COLUMNS == tiles * catalog.KERNEL["topk_rowwise"].block * vec * 4


def test_rows_past_a_group_launch_the_split_path_group_by_group(hopper):
    """Rows past a group (SPLIT_MAX_ROWS rows; group_rows=4 here): three launches a group over one workspace of a
    group's rows, each group's pointers at its first row, the last group holding what is left."""
    from hipindexer.plan import plan_topk
    from hipindexer.plan.topk import SPLIT_MAX_ROWS, workspace_bytes
    hb, dev = hopper
    assert plan_topk(2500, 1 << 14, 2048, topk.target_of(dev), split=True).group_rows == SPLIT_MAX_ROWS
    assert workspace_bytes(2500, 2048) == workspace_bytes(SPLIT_MAX_ROWS, 2048)
    rows, N, top_k = 10, 1 << 14, 64
    logits = DeviceArray.empty((rows, N), np.float32, dev)
    lengths = DeviceArray.empty((rows,), np.int32, dev)
    out = DeviceArray.empty((rows, top_k + 3), np.int32, dev)[:, :top_k]
    values = DeviceArray.empty((rows, top_k), np.float32, dev)
    n0 = len(hb.launches)
    topk_logits(logits, top_k, lengths=lengths, out=out, values=values, return_values=True, group_rows=4)
    sent = hb.launches[n0:]
    assert [s[0] for s in sent] == ["hx_topk_split_floor", "hx_topk_split_gather", "hx_topk_split_finish"] * 3
    f = [SPLIT.ctype().from_buffer_copy(s[4]) for s in sent]
    assert [x.rows for x in f] == [4] * 6 + [2] * 3
    assert [x.logits - logits.ptr for x in f[::3]] == [0, 4 * N * 4, 8 * N * 4]
    assert [x.lengths - lengths.ptr for x in f[::3]] == [0, 16, 32]
    assert [x.indices - out.ptr for x in f[::3]] == [0, 4 * (top_k + 3) * 4, 8 * (top_k + 3) * 4]
    assert [x.values - values.ptr for x in f[::3]] == [0, 4 * top_k * 4, 8 * top_k * 4]
    assert len({x.work for x in f}) == 1
    assert [s[1][0] for s in sent[-3:]] == [2, 2 * f[-1].parts, 2]
