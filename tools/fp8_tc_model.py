"""How far fp8 tensor-core accumulation alone moves the prefill logits from the float64 reference.

A model, not the hardware's specification: every k32 step of a wgmma aligns its 32 exact products and
the running accumulator to the largest of them and keeps BITS fraction bits below it, truncating (the
behaviour DeepSeek-V3's report describes for Hopper's fp8 MMAs, about 14 bits). With --bits 13 it
reproduces the one row the sm_90a kernel fails: `check prefill`'s first case (seed 0, M=1, N=1, H=32,
causal), measured calc_diff 7.577e-05 on the H200, where the heads cancel 180-fold.

    python tools/fp8_tc_model.py --shape 1x1 --heads 32 --bits 13
"""
import click
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


@click.command()
@click.option("--shape", default="1x1", help="MxN")
@click.option("--heads", default=32)
@click.option("--dim", default=128)
@click.option("--mode", default="causal")
@click.option("--seed", default=0)
@click.option("--bits", default=13, help="fraction bits kept below the largest term")
def main(shape, heads, dim, mode, seed, bits):
    M, N = (int(x) for x in shape.split("x"))
    inp = testing.prefill_inputs(np.random.default_rng(seed), M, N, heads, dim, mode)
    q, k = inp.q.astype(np.float64), inp.k.astype(np.float64)
    w, s = inp.weights.astype(np.float64), inp.kv_scale.astype(np.float64)
    valid = reference.valid_mask(inp.cu_seqlen_ks, inp.cu_seqlen_ke, N)
    terms = np.maximum(tc_dots(q, k, bits), 0) * w[:, :, None]  # [M, H, N]
    model = np.where(valid, terms.sum(axis=1) * s, -np.inf)
    ref = reference.fp8_mqa_logits(inp.q, inp.k, inp.kv_scale, inp.weights, inp.cu_seqlen_ks, inp.cu_seqlen_ke,
                                   clean_logits=True, accumulate=np.float64)
    exact = np.maximum(np.einsum("mhd,nd->mhn", q, k), 0) * w[:, :, None]
    cancel = np.abs(exact).sum(axis=1) / np.maximum(np.abs(exact.sum(axis=1)), 1e-300)  # [M, N]
    diff = row_calc_diff(model, ref)  # finite positions: the shared -inf mask drops out
    worst = np.argsort(-diff)[:5]
    click.echo(f"M={M} N={N} H={heads} D={dim} {mode} seed {seed}, {bits} bits: "
               f"{int((diff >= 1e-5).sum())} of {M} rows at calc_diff >= 1e-5")
    for m in worst:
        c = cancel[m][valid[m]]
        click.echo(f"  row {m}: calc_diff {diff[m]:.3e}, head cancellation up to {c.max() if c.size else 0:.0f}x")


if __name__ == "__main__":
    main()
