"""hipindexer.topk_logits: the cases of tests/emu/topk_cases.py on the emulated MI355X (a child pytest whose HIP
is the emulator, on the tests' gfx950 build) and, marked gpu, on a real GPU, with rows there as long as a
decode step's (skipped without a GPU)."""
import numpy as np
import pytest

import emu_harness as H
import topk_cases as C


@pytest.mark.toolchain
def test_topk_cases_on_the_emulator(emu_kernels):
    p = H.run_child_pytest(emu_kernels, "tests/emu/topk_cases.py")
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
    assert f"{len(C.CASES)} passed" in p.stdout and "skipped" not in p.stdout, p.stdout[-2000:]


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(C.CASES))
def test_topk_cases_on_the_gpu(gpu_device, name):
    C.CASES[name](gpu_device)


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
