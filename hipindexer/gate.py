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
