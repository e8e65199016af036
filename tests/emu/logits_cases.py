"""hsaco_src/gfx950/logits_tile.hip against hipindexer.reference through the gate,
launched straight through libhxemu (shared by the tests and tools/support/emu_plants.py)."""

import numpy as np

from hipindexer import catalog, testing
from hipindexer.gate import gate_prefill

# (M, N, H, mode, clean): odd M (a half-empty last wave), N off the 32-key tile,
# every window mode of testing.PREFILL_MODES that applies, both clean_logits settings.
CASES = [(M, N, H, mode, clean)
         for (M, N) in [(37, 200), (6, 96)]
         for H in (32, 64)
         for mode in testing.PREFILL_MODES
         for clean in (True, False)]


def run(lib, M, N, H, mode, clean, seed=0):
    """Gate result of one case (raises testing.NotApplicable for a mode the shape fails)."""
    rng = np.random.default_rng(seed)
    inp = testing.prefill_inputs(rng, M=M, N=N, H=H, D=128, mode=mode)
    out = np.full((M, N), np.nan, np.float32)
    arrays = [np.ascontiguousarray(a) for a in (inp.q.view(np.uint8), inp.k.view(np.uint8), inp.kv_scale,
                                                  inp.weights, inp.cu_seqlen_ks, inp.cu_seqlen_ke)]
    q, k, s, w, ks, ke = (a.ctypes.data for a in arrays)
    P = catalog.STRUCT["LogitsTileParams"].ctype()
    p = P(q=q, k=k, kv_scale=s, weights=w, ks=ks, ke=ke, out=out.ctypes.data, out_stride=N, M=M, N=N, H=H,
          clean=int(clean))
    lib.launch("hx_logits_tile", p, grid=((N + 31) // 32, (M + 1) // 2, 1), block=64)
    return gate_prefill(out, inp, clean, "fp32")


def caught(lib):
    """(case, gate message) of the first case that fails, or None if every case passes."""
    for case in CASES:
        try:
            r = run(lib, *case)
        except testing.NotApplicable:
            continue
        if not r:
            return case, str(getattr(r, "message", r))
    return None
