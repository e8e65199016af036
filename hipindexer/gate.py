"""The acceptance gate of DESIGN.md section 3, as library functions."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

THRESHOLD = 1e-5


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
    den = np.sum(x * x + y * y, axis=1)
    num = np.sum(x * y, axis=1)
    return np.where(den == 0, 0.0, 1.0 - 2.0 * num / np.where(den == 0, 1.0, den))


@dataclass(frozen=True)
class GateResult:
    ok: bool
    message: str
    diff: float = 0.0

    def __bool__(self) -> bool:
        return self.ok


def _first(bad: np.ndarray) -> tuple[int, int]:
    r, c = np.argwhere(bad)[0]
    return int(r), int(c)


def gate(out, ref, valid, clean_logits: bool, threshold: float = THRESHOLD,
         rows=None) -> GateResult:
    """Check a kernel's logits against the reference.

    out, ref: [R, C] float32; valid: [R, C] bool, the positions the op owns.
    ``rows`` optionally names the global row index of each row (sampled checks).
    1. clean_logits: out is -inf exactly where ref is, and holds no NaN.
       otherwise: every position outside ``valid`` still holds its NaN poison,
       and no NaN inside.
    2. calc_diff(out, ref) < threshold over the whole array and on every row.
    """
    out = np.asarray(out)
    ref = np.asarray(ref)
    valid = np.asarray(valid, bool)
    if out.shape != ref.shape or valid.shape != ref.shape:
        return GateResult(False, f"shape: out {out.shape}, ref {ref.shape}, valid {valid.shape}")
    name = (lambda r: int(rows[r])) if rows is not None else (lambda r: r)
    nan = np.isnan(out)
    if clean_logits:
        if nan.any():
            r, c = _first(nan)
            return GateResult(False, f"NaN at row {name(r)}, col {c} (clean_logits=True writes every position)")
        mism = (out == -np.inf) != (ref == -np.inf)
        if mism.any():
            r, c = _first(mism)
            return GateResult(False, f"-inf mask differs at row {name(r)}, col {c}: out {out[r, c]}, "
                                     f"ref {ref[r, c]} ({int(mism.sum())} positions)")
    else:
        touched = ~nan & ~valid
        if touched.any():
            r, c = _first(touched)
            return GateResult(False, f"write outside the window at row {name(r)}, col {c}: {out[r, c]} "
                                     f"(clean_logits=False must leave the poison; {int(touched.sum())} positions)")
        hole = nan & valid
        if hole.any():
            r, c = _first(hole)
            return GateResult(False, f"NaN inside the window at row {name(r)}, col {c} "
                                     f"({int(hole.sum())} positions never written)")
    inf_in = valid & ~np.isfinite(out)
    if inf_in.any():
        r, c = _first(inf_in)
        return GateResult(False, f"non-finite value {out[r, c]} inside the window at row {name(r)}, col {c}")
    o = np.where(valid, out, 0.0)
    e = np.where(valid, ref, 0.0)
    total = calc_diff(o, e)
    if not total < threshold:
        return GateResult(False, f"calc_diff {total:.3e} over the whole output >= {threshold:g}", total)
    per_row = row_calc_diff(o, e)
    bad = ~(per_row < threshold)
    if bad.any():
        r = int(np.argmax(bad))
        c = int(np.argmax(np.abs(o[r] - e[r])))
        return GateResult(False, f"row {name(r)}: calc_diff {per_row[r]:.3e} >= {threshold:g} "
                                 f"(worst col {c}: out {out[r, c]}, ref {ref[r, c]})", total)
    return GateResult(True, f"ok (calc_diff {total:.2e}, worst row {float(per_row.max(initial=0)):.2e})", total)
