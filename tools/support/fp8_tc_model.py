"""How far fp8 tensor-core accumulation alone moves the prefill logits from the float64 reference.

A model, not the hardware's specification: every k32 step of a wgmma aligns its 32 exact products and
the running accumulator to the largest of them and keeps BITS fraction bits below it, truncating (the
behaviour DeepSeek-V3's report describes for Hopper's fp8 MMAs, about 14 bits). With --bits 13 it
reproduces the row on which the sm_90a kernel misses calc_diff 1e-5: `check prefill`'s first case (seed 0,
M=1, N=1, H=32, causal), whose heads cancel 180-fold (docs/accuracy.md gives the calc_diff an H200 returned).

    python -m tools.support.fp8_tc_model --shape 1x1 --heads 32 --bits 13

--fold models mqa_logits_wgmma_fold instead: 2 relu(x) = |x| + x, the |x| w part from the per-head dots and
the x w part from one more dot per query row against sum_h w_h q_h split into four e4m3 terms; its error
then grows with |sum_h w_h x_h| over every head rather than with the kept heads' terms.
"""
import click
import ml_dtypes
import numpy as np

from hipindexer import reference, testing
from hipindexer.gate import row_calc_diff


def tc_dots(q: np.ndarray, k: np.ndarray, bits: int, step: int = 32) -> np.ndarray:
    """q [M, H, D], k [N, D] (float64, exact fp8 values) -> [M, H, N] dots under the truncating model."""
    acc = np.zeros((q.shape[0], q.shape[1], k.shape[0]))
    for c in range(0, q.shape[2], step):
        prod = q[:, :, None, c:c + step] * k[None, None, :, c:c + step]
        top = np.maximum(np.abs(prod).max(axis=-1), np.abs(acc))
        ulp = np.exp2(np.floor(np.log2(np.where(top > 0, top, 1.0))) - bits)
        acc = (np.trunc(prod / ulp[..., None]).sum(axis=-1) + np.trunc(acc / ulp)) * ulp
    return acc


def fold_terms(q: np.ndarray, w: np.ndarray, terms: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """q [M, H, D], w [M, H] -> e4m3 terms [terms, M, D] and their scales [terms, M], as the kernel splits
    q_eff = sum_h w_h q_h (f32): s is the power of two with max |q_eff| / s <= 448, then s / 16 per term."""
    qe = np.einsum("mh,mhd->md", w.astype(np.float32), q.astype(np.float32)).astype(np.float32)
    m = np.abs(qe).max(axis=1)
    s = np.where(m > 0, np.exp2(np.ceil(np.log2(np.where(m > 0, m, 1.0) / 448.0))), 1.0).astype(np.float32)
    out, scales = [], []
    for _ in range(terms):
        t = (qe / s[:, None]).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
        out.append(t.astype(np.float64))
        scales.append(s.astype(np.float64))
        qe = (qe - s[:, None] * t).astype(np.float32)
        s = (s / 16).astype(np.float32)
    return np.stack(out), np.stack(scales)


def fold_logits(q: np.ndarray, k: np.ndarray, w: np.ndarray, bits: int) -> np.ndarray:
    """[M, N] sum_h w_h relu(x_h) the fold's way: (sum_h |x_h| w_h + k . q_eff) / 2, both under the model."""
    absdot = (np.abs(tc_dots(q, k, bits)) * w[:, :, None]).sum(axis=1)
    t, s = fold_terms(q, w)
    lin = sum(s[i][:, None] * tc_dots(t[i][:, None, :], k, bits)[:, 0, :] for i in range(len(t)))
    return (absdot + lin) / 2


@click.command()
@click.option("--shape", default="1x1", help="MxN")
@click.option("--heads", default=32)
@click.option("--dim", default=128)
@click.option("--mode", default="causal")
@click.option("--seed", default=0)
@click.option("--bits", default=13, help="fraction bits kept below the largest term")
@click.option("--fold", is_flag=True, help="model mqa_logits_wgmma_fold (H = 64)")
def main(shape, heads, dim, mode, seed, bits, fold):
    M, N = (int(x) for x in shape.split("x"))
    inp = testing.prefill_inputs(np.random.default_rng(seed), M, N, heads, dim, mode)
    q, k = inp.q.astype(np.float64), inp.k.astype(np.float64)
    w, s = inp.weights.astype(np.float64), inp.kv_scale.astype(np.float64)
    valid = reference.valid_mask(inp.cu_seqlen_ks, inp.cu_seqlen_ke, N)
    if fold:
        model = np.where(valid, fold_logits(q, k, w, bits) * s, -np.inf)
    else:
        terms = np.maximum(tc_dots(q, k, bits), 0) * w[:, :, None]  # [M, H, N]
        model = np.where(valid, terms.sum(axis=1) * s, -np.inf)
    ref = reference.fp8_mqa_logits(inp.q, inp.k, inp.kv_scale, inp.weights, inp.cu_seqlen_ks, inp.cu_seqlen_ke,
                                   clean_logits=True, accumulate=np.float64)
    exact = np.maximum(np.einsum("mhd,nd->mhn", q, k), 0) * w[:, :, None]
    cancel = np.abs(exact).sum(axis=1) / np.maximum(np.abs(exact.sum(axis=1)), 1e-300)  # [M, N]
    diff = row_calc_diff(model, ref)  # finite positions: the shared -inf mask drops out
    worst = np.argsort(-diff)[:5]
    click.echo(f"M={M} N={N} H={heads} D={dim} {mode} seed {seed}, {bits} bits{', fold' if fold else ''}: "
               f"{int((diff >= 1e-5).sum())} of {M} rows at calc_diff >= 1e-5")
    for m in worst:
        c = cancel[m][valid[m]]
        click.echo(f"  row {m}: calc_diff {diff[m]:.3e}, head cancellation up to {c.max() if c.size else 0:.0f}x")


if __name__ == "__main__":
    main()
