"""The acceptance gate: how a kernel's logits are judged against the float64 reference.

Every check runs these rules, in this order, and stops at the first that fails:

1. The mask. clean_logits=True: out is -inf exactly where the reference is, and
   holds no NaN. clean_logits=False: every position outside the windows still
   holds the NaN it was poisoned with, and none inside does.
2. Nothing non-finite inside a window.
3. Every element within its kernel's accumulation bound: |out - ref| <= eps * A,
   where A[r, n] = kv_scale[n] * sum_h |w[r, h]| * sum_d |q[r, h, d] * k[n, d]|
   is the magnitude the logit is made of (``reference.*(magnitude=True)``) and
   eps comes from the kernel's accumulation class (``catalog.ACCUMULATION``).
   A per-row mean hides one wrong element among 65,536; this bound does not.
4. calc_diff < 1e-5 on every row, except, for fp8 tensor-core kernels, rows whose
   heads cancel: such a row may miss 1e-5 only if its condition
   ||A_row|| / ||ref_row|| (2-norms over its valid positions) is >= 16 and rule 3
   holds on it. Those rows are counted and their worst calc_diff reported.
5. calc_diff < 1e-5 over the whole output, leaving out the rows rule 4 excused.

calc_diff(x, y) = 1 - 2 sum(x y) / sum(x^2 + y^2) in float64 over positions
finite in both, and 0 when both sums are zero. The work runs in row chunks, so
memory stays bounded whatever the output's size.

The top-k ops' output (indices, values) has its own gate, gate_topk, with the
same eps * A bound applied to the selection (docs/accuracy.md, "The top-k gate");
gate_prefill_topk and gate_paged_topk compute its reference from the inputs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .catalog import ACCUMULATION

THRESHOLD = 1e-5
MIN_CONDITION = 16.0       # rule 4: the condition a tensor-core row needs before it may miss THRESHOLD
TENSOR_CORE_CLASSES = ("fp8_tc",)
CHUNK_ELEMENTS = 1 << 22   # positions judged at a time


def calc_diff(x, y) -> float:
    """1 - 2 sum(x y) / sum(x^2 + y^2) in float64 over positions finite in both; 0 when both sums are 0."""
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    fin = np.isfinite(x) & np.isfinite(y)
    x, y = x[fin], y[fin]
    den = float(np.sum(x * x + y * y))
    if den == 0.0:
        return 0.0
    return 1.0 - 2.0 * float(np.sum(x * y)) / den


def row_calc_diff(x, y) -> np.ndarray:
    """calc_diff of every row of two [R, C] arrays, vectorised."""
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    fin = np.isfinite(x) & np.isfinite(y)
    x = np.where(fin, x, 0.0)
    y = np.where(fin, y, 0.0)
    return _diff(np.sum(x * y, axis=1), np.sum(x * x + y * y, axis=1))


def _diff(num, den):
    return np.where(den == 0, 0.0, 1.0 - 2.0 * num / np.where(den == 0, 1.0, den))


@dataclass(frozen=True)
class GateResult:
    """A verdict: truthy when every rule held. `message` says why not (the first rule broken, with its row
    and column), or sums up a pass; the figures are filled once the per-element bound has been checked."""
    ok: bool
    message: str
    diff: float = 0.0              # whole-output calc_diff over the rows not excused by rule 4
    worst_row: float = 0.0         # worst calc_diff of the rows not excused
    err_over_a: float = 0.0        # max |out - ref| / A over valid positions with A > 0
    exceptions: int = 0            # rows excused by rule 4
    worst_exception: float = 0.0   # their worst calc_diff

    def __bool__(self) -> bool:
        return self.ok


def eps_of(accumulation: str) -> float:
    """The per-element bound's eps of an accumulation class ("fp32": 2^-20, "fp8_tc": 2^-12); ValueError
    for an unknown class."""
    if accumulation not in ACCUMULATION:
        raise ValueError(f"accumulation: expected one of {list(ACCUMULATION)}, got {accumulation!r}")
    return ACCUMULATION[accumulation]


def gate(out, ref, valid, clean_logits: bool, *, magnitude, accumulation: str, threshold: float = THRESHOLD,
         rows=None) -> GateResult:
    """Judge a kernel's logits against the reference by the rules of this module's docstring.

    out: [R, C] float32, the kernel's output (poisoned with NaN before the call).
    ref, magnitude: [R, C], the float64 reference and its magnitude A (-inf / anything outside ``valid``).
    valid: [R, C] bool, the positions the op owns.
    accumulation: the kernel's class ("fp32" or "fp8_tc"), which sets eps and whether rule 4's exception exists.
    rows: optionally the global row index of each row (sampled checks), used in messages.
    Returns a GateResult; raises ValueError for an unknown accumulation class.

    >>> import numpy as np
    >>> ref = np.array([[1.0, -np.inf]]); A = np.array([[2.0, 0.0]]); valid = np.array([[True, False]])
    >>> bool(gate(np.array([[1.0, -np.inf]], np.float32), ref, valid, True, magnitude=A, accumulation="fp32"))
    True
    >>> gate(np.array([[1.001, -np.inf]], np.float32), ref, valid, True, magnitude=A, accumulation="fp32").message[:22]
    'row 0, col 0: |out - r'
    """
    eps = eps_of(accumulation)
    out, ref, A = np.asarray(out), np.asarray(ref), np.asarray(magnitude)
    valid = np.asarray(valid, bool)
    if not out.shape == ref.shape == valid.shape == A.shape:
        return GateResult(False, f"shape: out {out.shape}, ref {ref.shape}, magnitude {A.shape}, valid {valid.shape}")
    name = (lambda r: int(rows[r])) if rows is not None else (lambda r: r)
    R = out.shape[0]
    step = max(1, CHUNK_ELEMENTS // max(1, out.shape[1] if out.ndim == 2 else 1))
    num, den = np.zeros(R), np.zeros(R)
    a_sq, ref_sq = np.zeros(R), np.zeros(R)
    worst = 0.0
    for r0 in range(0, R, step):
        r1 = min(R, r0 + step)
        o, e, a, v = out[r0:r1], ref[r0:r1], A[r0:r1], valid[r0:r1]
        msg = _mask(o, e, v, clean_logits, lambda r: name(r0 + r))
        if msg:
            return GateResult(False, msg)
        o64 = np.where(v, o, 0.0).astype(np.float64)
        e64 = np.where(v, e, 0.0).astype(np.float64)
        a64 = np.where(v, a, 0.0).astype(np.float64)
        err = np.abs(o64 - e64)
        over = err > eps * a64
        if over.any():
            r, c = _first(over)
            return GateResult(False, f"row {name(r0 + r)}, col {c}: |out - ref| = {err[r, c]:.3e} > eps * A = "
                                     f"2^{np.log2(eps):.0f} * {a64[r, c]:.4g} (out {o[r, c]}, ref {e[r, c]}; "
                                     f"{int(over.sum())} positions in rows {name(r0)}..{name(r1 - 1)})")
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(a64 > 0, err / np.where(a64 > 0, a64, 1.0), 0.0)
        worst = max(worst, float(ratio.max(initial=0.0)))
        num[r0:r1] = np.sum(o64 * e64, axis=1)
        den[r0:r1] = np.sum(o64 * o64 + e64 * e64, axis=1)
        a_sq[r0:r1] = np.sum(a64 * a64, axis=1)
        ref_sq[r0:r1] = np.sum(e64 * e64, axis=1)
    per_row = _diff(num, den)
    missed = ~(per_row < threshold)
    with np.errstate(divide="ignore", invalid="ignore"):
        condition = np.where(ref_sq > 0, np.sqrt(a_sq / np.where(ref_sq > 0, ref_sq, 1.0)), np.inf)
    excused = missed & (condition >= MIN_CONDITION) if accumulation in TENSOR_CORE_CLASSES else \
        np.zeros(R, bool)
    failed = missed & ~excused
    if failed.any():
        r = int(np.argmax(failed))
        c = int(np.argmax(np.abs(np.where(valid[r], out[r], 0.0) - np.where(valid[r], ref[r], 0.0))))
        why = (f"; condition {condition[r]:.1f} < {MIN_CONDITION:g}" if accumulation in TENSOR_CORE_CLASSES
               else f"; {accumulation} kernels have no ill-conditioned-row exception")
        return GateResult(False, f"row {name(r)}: calc_diff {per_row[r]:.3e} >= {threshold:g}{why} "
                                 f"(worst col {c}: out {out[r, c]}, ref {ref[r, c]})", err_over_a=worst)
    kept = ~excused
    total = float(_diff(num[kept].sum(), den[kept].sum()))
    worst_row = float(per_row[kept].max(initial=0.0))
    n_exc = int(excused.sum())
    worst_exc = float(per_row[excused].max(initial=0.0))
    stats = dict(diff=total, worst_row=worst_row, err_over_a=worst, exceptions=n_exc, worst_exception=worst_exc)
    if not total < threshold:
        return GateResult(False, f"calc_diff {total:.3e} over the whole output >= {threshold:g}", **stats)
    exc = f", {n_exc} ill-conditioned rows excused (worst {worst_exc:.2e})" if n_exc else ""
    return GateResult(True, f"ok (calc_diff {total:.2e}, worst row {worst_row:.2e}, max err/A "
                            f"{_pow2(worst)}{exc})", **stats)


def _pow2(x: float) -> str:
    return "0" if x == 0 else f"2^{np.log2(x):.1f}"


def _first(bad: np.ndarray) -> tuple[int, int]:
    r, c = np.argwhere(bad)[0]
    return int(r), int(c)


def _mask(out, ref, valid, clean_logits, name) -> str | None:
    nan = np.isnan(out)
    if clean_logits:
        if nan.any():
            r, c = _first(nan)
            return f"NaN at row {name(r)}, col {c} (clean_logits=True writes every position)"
        mism = (out == -np.inf) != (ref == -np.inf)
        if mism.any():
            r, c = _first(mism)
            return (f"-inf mask differs at row {name(r)}, col {c}: out {out[r, c]}, ref {ref[r, c]} "
                    f"({int(mism.sum())} positions)")
    else:
        touched = ~nan & ~valid
        if touched.any():
            r, c = _first(touched)
            return (f"write outside the window at row {name(r)}, col {c}: {out[r, c]} "
                    f"(clean_logits=False must leave the poison; {int(touched.sum())} positions)")
        hole = nan & valid
        if hole.any():
            r, c = _first(hole)
            return f"NaN inside the window at row {name(r)}, col {c} ({int(hole.sum())} positions never written)"
    inf_in = valid & ~np.isfinite(out)
    if inf_in.any():
        r, c = _first(inf_in)
        return f"non-finite value {out[r, c]} inside the window at row {name(r)}, col {c}"
    return None


def gate_prefill(out, inputs, clean_logits: bool, accumulation: str, rows=None) -> GateResult:
    """``gate`` for prefill logits: the reference, A and the mask computed here in float64 from
    ``inputs`` (a ``testing.PrefillInputs`` or its ``args()``), on all rows or on ``rows`` of the output."""
    from . import reference
    q, k, kv_scale, weights, ks, ke = inputs.args() if hasattr(inputs, "args") else inputs
    out = np.asarray(out)
    if rows is not None:
        rows = np.asarray(rows)
        q, weights, ks, ke, out = q[rows], weights[rows], ks[rows], ke[rows], out[rows]
    args = (q, k, kv_scale, weights, ks, ke)
    ref = reference.fp8_mqa_logits(*args, clean_logits=clean_logits, accumulate=np.float64)
    A = reference.fp8_mqa_logits(*args, accumulate=np.float64, magnitude=True)
    valid = reference.valid_mask(ks, ke, k.shape[0])
    return gate(out, ref, valid, clean_logits, magnitude=A, accumulation=accumulation, rows=rows)


def gate_decode(out, inputs, clean_logits: bool, accumulation: str) -> GateResult:
    """``gate`` for decode logits, from ``inputs`` (a ``testing.DecodeInputs`` or its ``args()``)."""
    from . import reference
    args = inputs.args() if hasattr(inputs, "args") else tuple(inputs)
    q, kv_cache, weights, context_lens, block_tables, max_model_len, next_n_lens = args[:7]
    ref = reference.fp8_paged_mqa_logits(*args, clean_logits=clean_logits, accumulate=np.float64)
    A = reference.fp8_paged_mqa_logits(*args, accumulate=np.float64, magnitude=True)
    valid = reference.decode_valid_mask(context_lens, q.shape[1], max_model_len, next_n_lens)
    return gate(out, ref, valid, clean_logits, magnitude=A, accumulation=accumulation)


# ------------------------------------------------------------------ top-k

@dataclass(frozen=True)
class TopkGateResult:
    """A top-k verdict: truthy when every top-k rule held (gate_topk). `message` names the first row and slot
    that broke one, or sums up a pass. The figures compare the returned sets with the reference's exact sets
    (descending float64 logit, ties by lower index), over the rows judged before any failure."""
    ok: bool
    message: str
    recall: float = 1.0        # returned keys in the exact sets / the exact sets' sizes, over all rows
    worst_recall: float = 1.0  # the lowest recall of one row that has keys
    swaps: int = 0             # returned keys outside the exact sets: each one a swap the bound allowed
    tie_swaps: int = 0         # those of them whose logit equals the exact set's last one (an exact tie)

    def __bool__(self) -> bool:
        return self.ok


class _Tally:
    """The figures of a TopkGateResult, summed over row chunks."""

    def __init__(self):
        self.hits = self.wanted = self.swaps = self.tie_swaps = 0
        self.worst = 1.0

    def result(self, ok: bool, message: str) -> TopkGateResult:
        recall = self.hits / self.wanted if self.wanted else 1.0
        return TopkGateResult(ok, message, recall, self.worst, self.swaps, self.tie_swaps)

    def passed(self) -> TopkGateResult:
        ties = f" ({self.tie_swaps} of them exact ties)" if self.swaps else ""
        return self.result(True, f"ok (recall {self.hits}/{self.wanted}, worst row {self.worst:.4f}; "
                                 f"{self.swaps} swaps within the bound{ties})")


def _topk_shapes(indices, values, R: int, N: int, top_k) -> str | None:
    if indices.ndim != 2 or indices.shape[0] != R:
        return f"indices: expected [{R}, top_k], got shape {indices.shape}"
    if indices.dtype.kind not in "iu":
        return f"indices: expected integers, got {indices.dtype.name}"
    if top_k is not None and indices.shape[1] != top_k:
        return f"indices: {indices.shape[1]} slots per row, but top_k is {top_k}"
    if values is not None and values.shape != indices.shape:
        return f"values: shape {values.shape}, but indices have {indices.shape}"
    return None


def _judge_topk(idx, vals, ref, A, valid, eps: float, in_order: bool, row0: int, tally: _Tally) -> str | None:
    """The rules of gate_topk on one chunk of rows; the first broken one's message, or None after adding
    the chunk's figures to `tally`."""
    from .reference import select_topk
    R, K = idx.shape
    N = ref.shape[1]
    idx = idx.astype(np.int64)
    pad = idx == -1
    bad = ~pad & ((idx < 0) | (idx >= N))
    if bad.any():
        r, s = _first(bad)
        return f"row {row0 + r}, slot {s}: index {idx[r, s]} is neither -1 nor a column in [0, {N})"
    V = valid.sum(axis=1)
    c = np.minimum(V, K)
    want = np.arange(K)[None, :] < c[:, None]
    if (want == pad).any():
        r, s = _first(want == pad)
        if pad[r, s]:
            return (f"row {row0 + r}, slot {s}: -1, but the row has {V[r]} valid keys, so its first "
                    f"min({V[r]}, top_k={K}) = {c[r]} slots hold indices")
        return (f"row {row0 + r}, slot {s}: index {idx[r, s]} where the padding -1 belongs (the row has only "
                f"{V[r]} valid keys)")
    safe = np.where(pad, 0, idx)
    bad = ~pad & ~np.take_along_axis(valid, safe, axis=1)
    if bad.any():
        r, s = _first(bad)
        cols = np.nonzero(valid[r])[0]
        span = f"in [{cols[0]}, {cols[-1] + 1})" if cols.size else "none"
        return f"row {row0 + r}, slot {s}: index {idx[r, s]} is not a valid key of the row (valid keys: {span})"
    ordered = np.sort(np.where(pad, -1, idx), axis=1)
    dup = (ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)
    if dup.any():
        r, s = _first(dup)
        n = ordered[r, s + 1]
        a, b = np.nonzero(idx[r] == n)[0][:2]
        return f"row {row0 + r}, slot {b}: index {n} returned twice (slots {a} and {b})"
    with np.errstate(invalid="ignore"):
        ref_at = np.where(pad, 0.0, np.take_along_axis(ref, safe, axis=1))
        a_at = np.where(pad, 0.0, np.take_along_axis(A, safe, axis=1))
        if vals is not None:
            v = vals.astype(np.float64)
            bad = pad & ~(v == -np.inf)
            if bad.any():
                r, s = _first(bad)
                return f"row {row0 + r}, slot {s}: padding slot holds value {v[r, s]}, not -inf"
            err = np.abs(v - ref_at)
            bad = ~pad & ~(err <= eps * a_at)   # NaN fails too
            if bad.any():
                r, s = _first(bad)
                return (f"row {row0 + r}, slot {s} (index {idx[r, s]}): |value - ref| = {err[r, s]:.3e} > eps * A "
                        f"= 2^{np.log2(eps):.0f} * {a_at[r, s]:.4g} (value {vals[r, s]}, ref {ref_at[r, s]})")
    if in_order:
        both = ~pad[:, 1:]
        if vals is not None:
            hi, lo = v[:, :-1], v[:, 1:]
            bad = both & ~((hi > lo) | ((hi == lo) & (idx[:, :-1] < idx[:, 1:])))
            what, why = "value", "sorted=True wants descending values, ties by lower index"
        else:  # without values, the order may only invert keys the bound cannot tell apart
            hi, lo = ref_at[:, :-1] + eps * a_at[:, :-1], ref_at[:, 1:] - eps * a_at[:, 1:]
            bad = both & (hi < lo)
            what, why = "ref +- eps * A", "the second beats the first by more than the bound"
        if bad.any():
            r, s = _first(bad)
            return (f"row {row0 + r}, slots {s} and {s + 1}: out of order, index {idx[r, s]} ({what} "
                    f"{hi[r, s]:.7g}) then index {idx[r, s + 1]} ({what} {lo[r, s]:.7g}); {why}")
    # The selection: no left-out valid key may beat a returned one by more than both their bounds.
    rows = np.arange(R)[:, None]
    chosen = np.zeros(valid.shape, bool)
    chosen[np.broadcast_to(rows, idx.shape)[~pad], idx[~pad]] = True
    with np.errstate(invalid="ignore"):
        floor_in = np.where(pad, np.inf, ref_at + eps * a_at)
        ceil_out = np.where(valid & ~chosen, ref - eps * A, -np.inf)
    s_in = np.argmin(floor_in, axis=1)
    j_out = np.argmax(ceil_out, axis=1)
    lo_in = floor_in[np.arange(R), s_in]
    hi_out = ceil_out[np.arange(R), j_out]
    bad = hi_out > lo_in
    if bad.any():
        r = int(np.argmax(bad))
        s, j, i = int(s_in[r]), int(j_out[r]), int(idx[r, s_in[r]])
        return (f"row {row0 + r}: left-out key {j} beats returned key {i} (slot {s}) by more than the bound: "
                f"ref - eps * A = {hi_out[r]:.7g} (ref {ref[r, j]:.7g}, A {A[r, j]:.4g}) > ref + eps * A = "
                f"{lo_in[r]:.7g} (ref {ref[r, i]:.7g}, A {A[r, i]:.4g})")
    exact, exact_val = select_topk(np.where(valid, ref, -np.inf), valid, K)
    in_exact = np.zeros(valid.shape, bool)
    in_exact[np.broadcast_to(rows, exact.shape)[exact >= 0], exact[exact >= 0]] = True
    hit = ~pad & np.take_along_axis(in_exact, safe, axis=1)
    hits = hit.sum(axis=1)
    last = np.where(c > 0, exact_val[np.arange(R), np.maximum(c - 1, 0)], np.nan)
    tally.hits += int(hits.sum())
    tally.wanted += int(c.sum())
    tally.swaps += int((c - hits).sum())
    tally.tie_swaps += int((~pad & ~hit & (ref_at == last[:, None])).sum())
    if (c > 0).any():
        tally.worst = min(tally.worst, float((hits[c > 0] / c[c > 0]).min()))
    return None


def gate_topk(indices, values, ref, magnitude, valid, accumulation: str, sorted=False,
              top_k=None) -> TopkGateResult:
    """Judge a top-k op's output against the float64 reference logits; docs/accuracy.md, "The top-k gate".

    indices: [R, top_k] integers, the op's output; values: its [R, top_k] values, or None when the op
    returned none. ref, magnitude: [R, N] float64, the reference logits and their magnitude A (anything
    outside ``valid``); valid: [R, N] bool, the keys each row may select. accumulation: the class of the
    kernel that computed the logits ("fp32": eps 2^-20, "fp8_tc": 2^-12). top_k: the op's top_k, when given
    checked against the indices' width.
    Rules, each on every row, stopping at the first broken: every index is -1 or a column; a row of V valid
    keys holds min(V, top_k) indices, then -1; every index valid for its row; no index twice; values (when
    given) -inf at the -1 slots and within eps * A of ref at their index; with sorted=True, non-increasing
    values, ties by lower index (without values: no adjacent pair inverted by more than the bound); and the
    selection consistent with the bound: max over left-out valid j of ref_j - eps * A_j <= min over returned
    i of ref_i + eps * A_i. Recall and swaps against the exact sets come with a pass.
    Returns a TopkGateResult; raises ValueError for an unknown accumulation class.

    >>> import numpy as np
    >>> ref = np.array([[3.0, 1.0, 2.0, -np.inf]]); A = np.full((1, 4), 4.0); valid = ref > -np.inf
    >>> bool(gate_topk([[0, 2]], [[3.0, 2.0]], ref, A, valid, "fp32", sorted=True))
    True
    >>> gate_topk([[0, 1]], None, ref, A, valid, "fp32").message[:36]
    'row 0: left-out key 2 beats returned'
    """
    eps = eps_of(accumulation)
    indices = np.asarray(indices)
    values = None if values is None else np.asarray(values)
    ref, A, valid = np.asarray(ref), np.asarray(magnitude), np.asarray(valid, bool)
    if not ref.shape == A.shape == valid.shape or ref.ndim != 2:
        return TopkGateResult(False, f"shape: ref {ref.shape}, magnitude {A.shape}, valid {valid.shape}")
    msg = _topk_shapes(indices, values, ref.shape[0], ref.shape[1], top_k)
    if msg:
        return TopkGateResult(False, msg)
    tally = _Tally()
    step = max(1, CHUNK_ELEMENTS // max(1, ref.shape[1]))
    for r0 in range(0, ref.shape[0], step):
        sl = slice(r0, r0 + step)
        msg = _judge_topk(indices[sl], None if values is None else values[sl], ref[sl], A[sl], valid[sl], eps,
                          sorted, r0, tally)
        if msg:
            return tally.result(False, msg)
    return tally.passed()


def gate_prefill_topk(out_indices, out_values, inputs, top_k: int, accumulation: str, sorted=False,
                      relative=False) -> TopkGateResult:
    """``gate_topk`` for fp8_mqa_topk's output, with the reference logits, A and the windows computed here
    in float64 from ``inputs`` (a ``testing.PrefillInputs`` or its ``args()``), a chunk of rows at a time.
    out_values: None when the op returned no values. relative: the op was called with relative=True (its
    indices count from cu_seqlen_ks[m])."""
    from . import reference
    q, k, kv_scale, weights, ks, ke = inputs.args() if hasattr(inputs, "args") else inputs
    eps = eps_of(accumulation)
    idx = np.asarray(out_indices)
    vals = None if out_values is None else np.asarray(out_values)
    M, N = q.shape[0], k.shape[0]
    msg = _topk_shapes(idx, vals, M, N, top_k)
    if msg:
        return TopkGateResult(False, msg)
    if relative:
        idx = np.where(idx == -1, -1, idx.astype(np.int64) + np.asarray(ks, np.int64)[:, None])
    tally = _Tally()
    step = max(1, CHUNK_ELEMENTS // max(1, N))
    for r0 in range(0, M, step):
        sl = slice(r0, r0 + step)
        args = (q[sl], k, kv_scale, weights[sl], ks[sl], ke[sl])
        ref = reference.fp8_mqa_logits(*args, accumulate=np.float64)
        A = reference.fp8_mqa_logits(*args, accumulate=np.float64, magnitude=True)
        msg = _judge_topk(idx[sl], None if vals is None else vals[sl], ref, A,
                          reference.valid_mask(ks[sl], ke[sl], N), eps, sorted, r0, tally)
        if msg:
            return tally.result(False, msg + (" (relative indices, shown as columns of k)" if relative else ""))
    return tally.passed()


def gate_paged_topk(out_indices, out_values, inputs, top_k: int, accumulation: str, sorted=False,
                    slots=None) -> TopkGateResult:
    """``gate_topk`` for fp8_paged_mqa_topk's output, with the reference logits, A and each row's keys
    computed here in float64 from ``inputs`` (a ``testing.DecodeInputs`` or its ``args()``), a chunk of
    sequences at a time. out_values: None when the op returned no values. slots: the op's cache slots
    (return_slots=True), then checked to be block_tables[b, n // block_size] * block_size + n % block_size
    at every index n, and -1 at every -1."""
    from . import reference
    args = inputs.args() if hasattr(inputs, "args") else tuple(inputs)
    q, kv_cache, weights, context_lens, block_tables, max_model_len = args[:6]
    next_n_lens = args[6] if len(args) > 6 else None
    preshuffle = args[7] if len(args) > 7 else False
    eps = eps_of(accumulation)
    idx = np.asarray(out_indices)
    vals = None if out_values is None else np.asarray(out_values)
    B, next_n = q.shape[:2]
    msg = _topk_shapes(idx, vals, B * next_n, max_model_len, top_k)
    if msg:
        return TopkGateResult(False, msg)
    ctx, bt = np.asarray(context_lens), np.asarray(block_tables)
    bound = reference.decode_bounds(ctx, next_n, max_model_len, next_n_lens)
    tally = _Tally()
    step = max(1, CHUNK_ELEMENTS // max(1, next_n * max_model_len))
    for b0 in range(0, B, step):
        b1 = min(B, b0 + step)
        r0, r1 = b0 * next_n, b1 * next_n
        chunk = (q[b0:b1], kv_cache, weights[r0:r1], ctx[b0:b1], bt[b0:b1], max_model_len,
                 None if next_n_lens is None else next_n_lens[b0:b1], preshuffle)
        ref = reference.fp8_paged_mqa_logits(*chunk, accumulate=np.float64)
        A = reference.fp8_paged_mqa_logits(*chunk, accumulate=np.float64, magnitude=True)
        valid = np.arange(max_model_len)[None, :] < bound[r0:r1, None]
        msg = _judge_topk(idx[r0:r1], None if vals is None else vals[r0:r1], ref, A, valid, eps, sorted, r0,
                          tally)
        if msg:
            return tally.result(False, msg)
    if slots is not None:
        msg = _check_slots(idx.astype(np.int64), np.asarray(slots), bt, next_n, kv_cache.shape[1])
        if msg:
            return tally.result(False, msg)
    return tally.passed()


def _check_slots(idx, slots, block_tables, next_n: int, block_size: int) -> str | None:
    if slots.shape != idx.shape:
        return f"slots: shape {slots.shape}, but indices have {idx.shape}"
    n = np.maximum(idx, 0)
    col = np.minimum(n // block_size, max(0, block_tables.shape[1] - 1))
    b = np.arange(idx.shape[0])[:, None] // next_n
    block = block_tables[b, col].astype(np.int64) if block_tables.shape[1] else np.zeros_like(n)
    want = np.where(idx >= 0, block * block_size + n % block_size, -1)
    bad = slots != want
    if bad.any():
        r, s = _first(bad)
        return f"row {r}, slot {s}: cache slot {slots[r, s]} for index {idx[r, s]}, expected {want[r, s]}"
    return None
