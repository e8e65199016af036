"""A process that ends while it still holds device memory (a workspace an op keeps, an array in a global) exits
cleanly: nothing is freed through a stream or context the interpreter's last collection already destroyed."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = """
import numpy as np
import hipindexer
from hipindexer.runtime import Device, DeviceArray
dev = Device({device!r})
x = DeviceArray.from_numpy(np.random.default_rng(0).standard_normal((4, {n})).astype(np.float32), dev)
idx = hipindexer.topk_logits(x, 16, device=dev)  # {n} columns: the split path, whose workspace the op keeps
dev.synchronize()
print("done")
"""


def _run(device: str, n: int):
    return subprocess.run([sys.executable, "-c", SCRIPT.format(device=device, n=n)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.gpu
def test_a_process_holding_an_ops_workspace_exits_cleanly(gpu_device):
    p = _run(f"{gpu_device.backend}:{gpu_device.index}", 131072)
    assert p.returncode == 0 and p.stdout.strip() == "done", (p.returncode, p.stderr[-2000:])
