"""hipindexer.topk_logits on a device, against hipindexer.reference.topk_logits and the top-k gate.

Every case is a named function of a device in CASES, run once per path in PATHS (FORCED holds the path's
tunables while a case runs; every call goes through topk()): the single-block kernel, the split path cut
into parts small enough that an emulated case has many of them, and the row-wise path (whose buffer is cut
mid-row where a floor keeps more than 7168 keys of a row, and which reads a row again where its floor kept
fewer than top_k), where rows of up to 32,768 columns are held in the block and selected there, and that path again
with no row held. tests/test_topk_logits.py runs them on the
emulated MI355X (this file in a child pytest with -p emu_session, where Device() is the emulator) and, marked
gpu, on a real GPU. Outputs are poisoned before each call (indices INT32_MIN, values NaN), so a slot the kernel
leaves unwritten fails; inputs are fresh random arrays per case. A result must pass gate_topk with zero
magnitude (the op computes no logits, so its values and selection are exact) and equal the reference's exact
selection: the same index set per row (ties by lower index, which the gate alone would let swap), and with
sorted=True the same order and the same float32 bits.
"""
from __future__ import annotations

import numpy as np
import pytest

import hipindexer
from hipindexer import gate, reference
from hipindexer.runtime import Device, DeviceArray

POISON_INDEX = np.iinfo(np.int32).min
FORCED: dict = {}  # the tunables every call of a case passes: the path under test (PATHS)
PATHS = {"single": {"split": False}, "split": {"split": True, "part_columns": 512}, "rowwise": {"rowwise": True},
         "rowwise_floor": {"rowwise": True, "held": False}, "resident": {"resident": True},
         "resident_narrow": {"resident": True, "narrow": True}}
SM90A_PATHS = {"cluster": {"cluster": True}}  # sm_90a paths, not emulated (tests/test_topk_cluster.py)


def topk(*args, **kw):
    """hipindexer.topk_logits on the path under test. Rows the resident or the cluster path cannot hold raise,
    naming it, and are then selected on the op's own path."""
    logits, top_k = (list(args) + [kw.get("logits"), kw.get("top_k")][len(args):])[:2]
    for path, fits, error in (("resident", "resident_fits", "^resident=True: rows of"),
                              ("cluster", "cluster_fits", "^cluster=True: no cluster path")):
        if FORCED.get(path) and not _fits(fits, logits, top_k, kw.get("device")):
            with pytest.raises(ValueError, match=error):
                hipindexer.topk_logits(*args, **FORCED, **kw)
            return hipindexer.topk_logits(*args, **kw)
    return hipindexer.topk_logits(*args, **FORCED, **kw)


def _fits(name, logits, top_k, dev) -> bool:
    """plan.topk's `name` (resident_fits, cluster_fits) for the call's rows."""
    from hipindexer.ops.launch import target_of
    from hipindexer.plan import topk as plan
    if type(top_k) is not int or not 1 <= top_k <= 4096 or getattr(logits, "ndim", 0) != 2:
        return True  # an argument the op rejects first
    return getattr(plan, name)(logits.shape[-1], top_k, target_of(dev))


def _poisoned(dev, rows, top_k, pad=0):
    """Fresh out and values arrays, [rows, top_k] views of rows top_k + pad wide, full of poison."""
    idx = DeviceArray.from_numpy(np.full((rows, top_k + pad), POISON_INDEX, np.int32), dev)
    val = DeviceArray.from_numpy(np.full((rows, top_k + pad), np.nan, np.float32), dev)
    return (idx[:, :top_k], val[:, :top_k]) if pad else (idx, val)


def valid_of(x, lengths):
    N = x.shape[1]
    if lengths is None:
        return x != -np.inf
    return np.arange(N)[None, :] < np.minimum(np.maximum(np.asarray(lengths, np.int64), 0), N)[:, None]


def expect_exact(idx, val, x, top_k, sorted, lengths=None, valid=None):
    """The op's (indices, values) against the exact selection: reference.topk_logits, or with `valid` (a mask
    the reference cannot take, e.g. device-held NaN left out) its selection over that mask. gate_topk at
    zero magnitude first where every valid logit is finite (its value rule has no room for -inf)."""
    own_mask = valid is not None
    valid = valid_of(x, lengths) if valid is None else valid
    assert idx.shape == val.shape == (x.shape[0], top_k) and idx.dtype == np.int32 and val.dtype == np.float32
    if np.isfinite(x[valid]).all():
        g = gate.gate_topk(idx, val, x.astype(np.float64), np.zeros(x.shape), valid, "fp32", sorted=sorted,
                           top_k=top_k)
        assert g, g.message
        assert g.recall == 1.0 and g.swaps == 0, g.message
    if own_mask:  # select_topk's order is the sorted contract's: float32 inputs are exact in float64
        want_idx, _ = reference.select_topk(np.where(valid, x, -np.inf), valid, top_k)
        want_val = np.where(want_idx >= 0, np.take_along_axis(x, np.maximum(want_idx, 0), axis=1), -np.inf)
    else:
        want_idx, want_val = reference.topk_logits(x, top_k, sorted=sorted, lengths=lengths)
    live = want_idx >= 0
    assert (idx[~live] == -1).all() and (val[~live] == -np.inf).all(), "padding: -1 and -inf past each row's count"
    assert (np.sort(np.where(live, idx, -1), axis=1) == np.sort(want_idx, axis=1)).all(), "the selected sets"
    at = np.take_along_axis(x, np.where(live, idx, 0), axis=1)
    assert (val.view(np.uint32)[live] == at.view(np.uint32)[live]).all(), "values: the logits at their indices"
    if not sorted:  # both paths give index order, which callers may come to rely on
        ranked = np.where(live, idx.astype(np.int64), (1 << 31) + np.arange(top_k))  # padding last
        assert (np.diff(ranked, axis=1) > 0).all(), "unsorted: index order"
    if sorted:
        assert (idx == want_idx).all(), "sorted order: descending value, equal values by lower index"
        assert (val.view(np.uint32) == want_val.astype(np.float32).view(np.uint32)).all()


def run(dev, x, top_k, sorted, lengths=None, pad=0, logits=None):
    """One call with poisoned outputs: (indices, values) as numpy."""
    out, values = _poisoned(dev, x.shape[0], top_k, pad)
    got = topk(x if logits is None else logits, top_k, lengths=lengths, sorted=sorted,
               return_values=True, out=out, values=values, device=dev)
    assert got[0] is out and got[1] is values
    return out.numpy(), values.numpy()


def run_with(dev, forced, x, top_k, sorted, lengths=None):
    """run() with the tunables `forced` in place of FORCED."""
    kept = dict(FORCED)
    FORCED.clear()
    FORCED.update(forced)
    try:
        return run(dev, x, top_k, sorted, lengths)
    finally:
        FORCED.clear()
        FORCED.update(kept)


def check(dev, x, top_k, sorted, lengths=None, **kw):
    idx, val = run(dev, x, top_k, sorted, lengths, **kw)
    expect_exact(idx, val, x, top_k, sorted, lengths)


def _masked(rng, R, N, density):
    """Normal logits with -inf at a random `density` of positions."""
    x = rng.standard_normal((R, N), dtype=np.float32)
    x[rng.random((R, N)) < density] = -np.inf
    return x


# ------------------------------------------------------------------ the cases

CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def _wide(dev, top_k, sorted, N):
    rng = np.random.default_rng(top_k * 2 + sorted)
    x = _masked(rng, 3, N, 0.1)
    assert (np.isfinite(x).sum(axis=1) >= 4 * top_k).all()  # V >= 4 top_k: the radix passes decide every row
    check(dev, x, top_k, sorted)


for _k, _n in ((1, 700), (7, 700), (512, 2400), (2048, 9200), (4096, 18300)):
    for _s in (False, True):
        def _fn(dev, k=_k, s=_s, n=_n):
            _wide(dev, k, s, n)
        _fn.__name__ = f"wide_rows_top{_k}_{'sorted' if _s else 'unsorted'}"
        case(_fn)


@case
def short_and_empty_rows(dev):
    """Rows with V < top_k valid positions (V = 0; V = 1 at the last column), V = top_k and V = top_k + 1:
    their V indices, then -1 and -inf."""
    rng = np.random.default_rng(11)
    top_k = 64
    x = _masked(rng, 7, 300, 0.0)
    for r, keep in enumerate((0, 1, 17, 63, 64, 65)):
        x[r, rng.permutation(300)[keep:]] = -np.inf
    x[6, :-1] = -np.inf  # the only valid position is the row's last column
    for sorted in (False, True):
        check(dev, x, top_k, sorted)


@case
def ties_decide_the_cut(dev):
    """Values from a pool of five, so the top_k-th value is shared by many positions: the lowest-indexed of
    them must be taken. -0.0 and +0.0 tie as equal values."""
    rng = np.random.default_rng(12)
    pool = np.array([-1.5, -0.0, 0.0, 2.0, 3.0], np.float32)
    x = rng.choice(pool, (5, 1500))
    x[rng.random(x.shape) < 0.05] = -np.inf
    for top_k in (1, 7, 300, 1000):
        for sorted in (False, True):
            check(dev, x, top_k, sorted)


@case
def all_equal_and_one_ulp_apart(dev):
    """Every value equal (the cut is all ties), and values a few ulps apart, which share their key's top two
    digits and differ only in the last radix pass."""
    rng = np.random.default_rng(13)
    same = np.full((2, 1000), 0.75, np.float32)
    near = (np.float32(1.0).view(np.uint32) + rng.integers(0, 900, (3, 2000)).astype(np.uint32)).view(np.float32)
    near[1] = -near[1]
    for x in (same, near):
        for top_k in (1, 33, 999):
            for sorted in (False, True):
                check(dev, x, top_k, sorted)


@case
def infinities_and_extremes(dev):
    """+inf, the largest and smallest finite floats and subnormals keep their order."""
    rng = np.random.default_rng(14)
    specials = np.array([np.inf, np.finfo(np.float32).max, -np.finfo(np.float32).max, np.float32(1e-45),
                         np.float32(-1e-45), np.finfo(np.float32).tiny], np.float32)
    x = _masked(rng, 4, 500, 0.2)
    x[:, rng.integers(0, 500, 40)] = rng.choice(specials, (4, 40))
    for sorted in (False, True):
        check(dev, x, 20, sorted)


@case
def lengths_mask_the_columns(dev):
    """With lengths the valid columns are [0, lengths[r]) clipped to N, whatever they hold: -inf there is a
    value to select (last), NaN past a row's length is never read into the result."""
    rng = np.random.default_rng(15)
    R, N, top_k = 7, 1200, 100
    x = _masked(rng, R, N, 0.3)
    lengths = np.array([0, 1, 99, 100, 101, 1200, 5000], np.int32)
    for r, n in enumerate(lengths):
        x[r, min(n, N):] = np.nan
    for sorted in (False, True):
        check(dev, x, top_k, sorted, lengths=lengths)
    check(dev, x, 1, True, lengths=lengths)


@case
def padded_rows_in_and_out(dev):
    """logits with a row stride wider than N (a logits op's padded out=) and out / values whose rows are
    padded: the padding is neither read into the result nor written."""
    rng = np.random.default_rng(16)
    R, N, top_k, pad = 4, 500, 50, 13
    wide = rng.standard_normal((R, N + pad), dtype=np.float32)
    wide[:, N:] = np.inf  # would win every row if it were read
    x = wide[:, :N]
    logits = DeviceArray.from_numpy(wide, dev)[:, :N]
    for sorted in (False, True):
        out, values = _poisoned(dev, R, top_k, pad)
        topk(logits, top_k, sorted=sorted, return_values=True, out=out, values=values, device=dev)
        expect_exact(out.numpy(), values.numpy(), x, top_k, sorted)
        base_idx = DeviceArray(out.ptr, (R, top_k + pad), np.int32, dev, owner=out).numpy()
        base_val = DeviceArray(values.ptr, (R, top_k + pad), np.float32, dev, owner=values).numpy()
        assert (base_idx[:, top_k:] == POISON_INDEX).all() and np.isnan(base_val[:, top_k:]).all()


@case
def device_held_nan_and_negative_lengths(dev):
    """Values only the device holds are not checked: a NaN at a valid position is left out as if invalid,
    a negative length selects nothing in its row."""
    rng = np.random.default_rng(17)
    R, N, top_k = 3, 400, 30
    x = _masked(rng, R, N, 0.2)
    nan = rng.random((R, N)) < 0.1
    x[nan] = np.nan
    for sorted in (False, True):
        idx, val = run(dev, x, top_k, sorted, logits=DeviceArray.from_numpy(x, dev))
        expect_exact(idx, val, x, top_k, sorted, valid=(x != -np.inf) & ~nan)
    lengths = DeviceArray.from_numpy(np.array([-5, 200, -1], np.int32), dev)
    y = rng.standard_normal((R, N), dtype=np.float32)
    idx, val = run(dev, y, top_k, True, lengths=lengths)
    expect_exact(idx, val, y, top_k, True, lengths=np.array([0, 200, 0]))


@case
def indices_only_and_the_same_output_twice(dev):
    """return_values=False returns the indices alone; two calls on the same inputs give the same bits,
    order included (unsorted too); a prepared launch (device-resident arrays) gives them again."""
    rng = np.random.default_rng(18)
    x = rng.choice(np.array([0.0, 1.0, 2.0], np.float32), (4, 3000))
    for sorted in (False, True):
        first = topk(x, 700, sorted=sorted, device=dev)
        assert isinstance(first, DeviceArray) and first.shape == (4, 700)
        a = first.numpy()
        expect_exact(a, np.take_along_axis(x, a, axis=1), x, 700, sorted)
        b = topk(x, 700, sorted=sorted, device=dev).numpy()
        logits = DeviceArray.from_numpy(x, dev)
        c = [run(dev, x, 700, sorted, logits=logits)[0] for _ in range(2)]
        assert (a == b).all() and (a == c[0]).all() and (a == c[1]).all()


@case
def more_rows_than_blocks(dev):
    """A grid smaller than the rows (the op caps it at MAX_BLOCKS): each block takes every grid-th row, its
    shared memory reused from one row to the next."""
    from hipindexer.ops import topk
    rng = np.random.default_rng(19)
    x = _masked(rng, 7, 900, 0.5)
    x[1] = np.round(x[1])
    kept = topk.MAX_BLOCKS
    topk.MAX_BLOCKS = 3
    try:
        for sorted in (False, True):
            check(dev, x, 200, sorted)
    finally:
        topk.MAX_BLOCKS = kept


@case
def no_rows(dev):
    idx, val = topk(np.zeros((0, 10), np.float32), 5, return_values=True, device=dev)
    assert idx.shape == val.shape == (0, 5)


@case
def bad_arguments_raise_naming_them(dev):
    x = np.zeros((2, 10), np.float32)
    out = DeviceArray.empty((2, 4), np.int32, dev)
    bad = [
        (dict(top_k=0), ValueError, "top_k"), (dict(top_k=4097), ValueError, "top_k"),
        (dict(top_k=2.0), ValueError, "top_k"), (dict(top_k=True), ValueError, "top_k"),
        (dict(logits=x.astype(np.float64)), TypeError, "logits"), (dict(logits=x[0]), ValueError, "logits"),
        (dict(lengths=np.array([1, 2, 3], np.int32)), ValueError, "lengths"),
        (dict(lengths=np.array([1, 2], np.int64)), TypeError, "lengths"),
        (dict(lengths=np.array([1, -2], np.int32)), ValueError, "lengths"),
        (dict(logits=np.where(np.arange(10) == 3, np.nan, x).astype(np.float32)), ValueError, "logits"),
        (dict(out=np.zeros((2, 4), np.int32)), TypeError, "out"),
        (dict(out=DeviceArray.empty((2, 5), np.int32, dev)), ValueError, "out"),
        (dict(out=DeviceArray.empty((2, 4), np.float32, dev)), TypeError, "out"),
        (dict(out=DeviceArray.empty((2, 8), np.int32, dev)[:, ::2]), ValueError, "out"),
        (dict(values=DeviceArray.empty((2, 4), np.float32, dev)), ValueError, "values"),
        (dict(values=DeviceArray.empty((2, 4), np.int32, dev), return_values=True), TypeError, "values"),
        (dict(sorted="yes"), TypeError, "sorted"),
    ]
    for change, error, name in bad:
        args = {"logits": x, "top_k": 4, "out": out, **change}
        with pytest.raises(error, match=f"^{name}"):
            topk(device=dev, **args)
    # a NaN past a row's length is not at a valid position
    y = x.copy()
    y[0, 5:] = np.nan
    topk(y, 4, lengths=np.array([5, 10], np.int32), out=out, device=dev)


@case
def rows_as_long_as_a_block_holds(dev):
    """Rows about as long as the row-wise path holds (32,768 columns), starting 4 bytes past a 16-byte boundary (three
    head columns, a tail): random; of five values (ties at the cut); all equal, so that every key reaches the floor
    and the row goes the long way; a -inf inside the row with lengths; lengths past the held columns (the long way),
    at them, below top_k and 0."""
    rng = np.random.default_rng(31)
    R, N, top_k = 6, 32771, 2048
    wide = rng.standard_normal((R, N + 1), dtype=np.float32)
    wide[1] = rng.choice(np.array([-1.0, 0.0, 0.5, 1.0, 2.0], np.float32), N + 1, p=[0.3, 0.3, 0.3, 0.07, 0.03])
    wide[2] = 0.25
    wide[3, rng.permutation(N)[:5000] + 1] = -np.inf
    logits = DeviceArray.from_numpy(wide, dev)[:, 1:]
    x = wide[:, 1:]
    for sorted in (False, True):
        idx, val = run(dev, x, top_k, sorted, logits=logits)
        expect_exact(idx, val, x, top_k, sorted)
    lengths = np.array([N, 32768, 30000, 20000, 1000, 0], np.int32)
    idx, val = run(dev, x, top_k, False, lengths=lengths, logits=logits)
    expect_exact(idx, val, x, top_k, False, lengths)


@case
def a_cut_between_two_entries(dev):
    """Rows whose top_k-th value sits alone in its radix bin, or ties in a bin of the indices' bits, so that the
    selection's cut is the bin's lowest possible entry, not an entry of the row: 2,047 values above a 1.0 (a key
    with every low bit 0) and the rest below it; 2,040 above twenty 1.0s; and with lengths, 2,047 finite values above
    a row of -inf, where the top_k-th is the first -inf."""
    rng = np.random.default_rng(37)
    R, N, top_k = 3, 8192, 2048
    x = rng.uniform(0.0, 0.5, (R, N)).astype(np.float32)
    for r, above, ones in ((0, 2047, 1), (1, 2040, 20)):
        at = rng.permutation(N)
        x[r, at[:above]] = rng.uniform(2.0, 3.0, above).astype(np.float32)
        x[r, at[above:above + ones]] = 1.0
    x[2] = -np.inf
    x[2, rng.permutation(N)[:2047]] = rng.uniform(2.0, 3.0, 2047).astype(np.float32)
    for sorted in (False, True):
        check(dev, x[:2], top_k, sorted)
        check(dev, x, top_k, sorted, lengths=np.full(R, N, np.int32))


# ------------------------------------------------------------------ the split path's own cases (on either path)

def _split_records(w, rows, top_k, cap=None):
    """(floors, kept counts) per row, as the split path's first two kernels left them in workspace w
    (hsaco_src/common/topk_split.h)."""
    from hipindexer.plan.topk import workspace_layout
    row_bytes = workspace_layout(top_k, cap)[0]
    rec = w.numpy()[: rows * row_bytes].reshape(rows, row_bytes)[:, :8].copy().view(np.uint32)
    return rec[:, 0], rec[:, 1]


@case
def rows_the_floor_cannot_serve_are_selected_whole(dev):
    """Three rows against floors from a half of each row (top_k 300: runs of 8 columns, one every 16): a random row,
    whose floor keeps between top_k and the workspace's cap of its keys; a row of two values, the larger in 50
    columns, whose floor keeps every key, past the cap; a row whose sampled columns hold its largest values, so that its floor keeps fewer
    than top_k. The last kernel finishes the first from what was kept and selects the other two whole, exactly (the
    workspace, read back, says which rows went which way); then every row past a cap of 40."""
    rng = np.random.default_rng(21)
    R, N, top_k = 3, 9000, 300
    x = rng.standard_normal((R, N), dtype=np.float32)
    x[1] = 1.0
    x[1, rng.permutation(N)[:50]] = 3.0
    sampled = np.arange(N) % 16 < 8
    x[2] = np.where(sampled, 10 + rng.random(N, dtype=np.float32), rng.random(N, dtype=np.float32))
    split = bool(FORCED.get("split"))
    from hipindexer.ops import topk as op
    w = op.topk_workspace(R, top_k, dev).fill(0xFF) if split else None  # no zeroing needed
    for sorted in (False, True):
        out, values = _poisoned(dev, R, top_k)
        topk(x, top_k, sorted=sorted, return_values=True, out=out, values=values, device=dev,
             **({"workspace": w} if split else {}))
        expect_exact(out.numpy(), values.numpy(), x, top_k, sorted)
        if split:
            floors, kept = _split_records(w, R, top_k)
            assert top_k <= kept[0] <= 2 * top_k and kept[1] == N > 8192, (floors, kept)
            assert floors[2] > 0 and 0 < kept[2] < top_k, (floors, kept)
    small = {**FORCED, "cap": 40} if split else FORCED  # every row keeps more than 40
    for sorted in (False, True):
        idx, val = run_with(dev, small, x, 100, sorted)
        expect_exact(idx, val, x, 100, sorted)


@case
def floors_keep_every_random_row_in_the_workspace(dev):
    """Random rows at top_k 2048 (floors from a sixteenth of each row): every row's floor keeps at least top_k and
    at most the cap of its keys, so none falls back to the single-block algorithm, which the exact result alone
    would not show."""
    rng = np.random.default_rng(27)
    R, N, top_k = 3, 40000, 2048
    x = _masked(rng, R, N, 0.25)
    split = bool(FORCED.get("split"))
    from hipindexer.ops import topk as op
    w = op.topk_workspace(R, top_k, dev) if split else None
    out, values = _poisoned(dev, R, top_k)
    topk(x, top_k, return_values=True, out=out, values=values, device=dev, **({"workspace": w} if split else {}))
    expect_exact(out.numpy(), values.numpy(), x, top_k, False)
    if split:
        floors, kept = _split_records(w, R, top_k)
        assert (floors > 0).all() and ((kept >= top_k) & (kept <= 8192)).all(), (floors, kept)


@case
def rows_in_groups(dev):
    """Eleven rows of the split path in groups of four (the last of three rows), with lengths and padded outputs:
    each group's rows are its own, and the workspace one group's."""
    rng = np.random.default_rng(28)
    R, N, top_k = 11, 3000, 150
    x = _masked(rng, R, N, 0.2)
    lengths = rng.integers(0, N + 50, R).astype(np.int32)
    kw = {**FORCED, "group_rows": 4} if FORCED.get("split") else FORCED
    for sorted in (False, True):
        kept = dict(FORCED)
        FORCED.clear()
        FORCED.update(kw)
        try:
            idx, val = run(dev, x, top_k, sorted, lengths, pad=5)
        finally:
            FORCED.clear()
            FORCED.update(kept)
        expect_exact(idx, val, x, top_k, sorted, lengths)


@case
def ties_across_parts(dev):
    """Equal values on both sides of every part boundary, the cut inside them: the lowest indices are taken
    whichever part (and whichever order of the parts' writes) holds them."""
    rng = np.random.default_rng(22)
    R, N = 4, 2600
    x = rng.choice(np.array([0.5, 1.0, 2.0], np.float32), (R, N), p=[0.6, 0.3, 0.1])
    x[:, 500:530] = 2.0  # a run across the boundary of 512-column parts
    x[2, ::3] = -np.inf
    for top_k in (1, 200, 291, 1500):
        for sorted in (False, True):
            check(dev, x, top_k, sorted)


@case
def lengths_cut_inside_a_part(dev):
    """Lengths that end inside a part, a float4 and a tile, or before a part starts; odd row strides, so
    each row's float4s start at another column."""
    rng = np.random.default_rng(23)
    R, N, top_k = 8, 6001, 64
    wide = rng.standard_normal((R, N + 3), dtype=np.float32)
    wide[:, N:] = np.inf
    lengths = np.array([0, 3, 513, 1023, 1030, 4097, 5999, 6001], np.int32)
    for r, n in enumerate(lengths):
        wide[r, n:N] = np.nan  # past the length: never read into the result
    logits = DeviceArray.from_numpy(wide, dev)[:, :N]
    for sorted in (False, True):
        out, values = _poisoned(dev, R, top_k)
        topk(logits, top_k, lengths=lengths, sorted=sorted, return_values=True, out=out, values=values, device=dev)
        expect_exact(out.numpy(), values.numpy(), wide[:, :N], top_k, sorted, lengths)


@case
def few_valid_in_long_rows(dev):
    """Rows of 3000 columns with V = 0, 1, top_k - 1, top_k, top_k + 1 valid positions spread over every part."""
    rng = np.random.default_rng(24)
    R, N, top_k = 6, 3000, 200
    x = rng.standard_normal((R, N), dtype=np.float32)
    for r, keep in enumerate((0, 1, 199, 200, 201, 3000)):
        x[r, rng.permutation(N)[keep:]] = -np.inf
    for sorted in (False, True):
        check(dev, x, top_k, sorted)


@case
def two_calls_leave_no_trace(dev):
    """Calls in a row on the same device arrays (the prepared launch, as a graph replays it) with other data
    each time, other lengths and top_k: each result is exact, so nothing of a call is left in the workspace
    for the next; likewise with a workspace= the caller holds, made full of 0xFF bytes. Rows of few distinct
    values (many keys at each floor), then random ones."""
    from hipindexer.ops import topk as op
    rng = np.random.default_rng(25)
    R, N = 3, 4000
    logits = DeviceArray.from_numpy(np.zeros((R, N), np.float32), dev)
    out, values = _poisoned(dev, R, 500)
    own = op.topk_workspace(R, 500, dev).fill(0xFF) if FORCED.get("split") else None  # no zeroing needed
    for i, workspace in enumerate([None] * 3 + [own] * 3):
        x = rng.standard_normal((R, N), dtype=np.float32) if i % 2 else np.round(rng.standard_normal((R, N)) * 2)
        x = x.astype(np.float32)
        logits.copy_from(x)
        for sorted in (False, True):
            got = topk(logits, 500, sorted=sorted, return_values=True, out=out, values=values, device=dev,
                       **({} if workspace is None else {"workspace": workspace}))
            assert got == (out, values)
            expect_exact(out.numpy(), values.numpy(), x, 500, sorted)


@case
def many_tiles_per_part(dev):
    """Parts of several tiles (4096 columns each at 256 threads) that end off a float4: every tile's slots in
    the row's lists are its own."""
    rng = np.random.default_rng(26)
    x = _masked(rng, 3, 20011, 0.3)
    kw = {**FORCED, "part_columns": 9004} if FORCED.get("split") else FORCED
    for top_k in (100, 4096):
        for sorted in (False, True):
            idx, val = run_with(dev, kw, x, top_k, sorted)
            expect_exact(idx, val, x, top_k, sorted)


# ------------------------------------------------------------------ on this process's device

@pytest.fixture(scope="module")
def dev():
    return Device()


def run_case(dev, name, path):
    """CASES[name] with every call on `path` (of PATHS or SM90A_PATHS)."""
    FORCED.clear()
    FORCED.update({**PATHS, **SM90A_PATHS}[path])
    try:
        CASES[name](dev)
    finally:
        FORCED.clear()


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("name", list(CASES))
def test_topk_case(dev, name, path):
    run_case(dev, name, path)
