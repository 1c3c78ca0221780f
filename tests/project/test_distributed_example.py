"""The data-parallel example runs as documented, with torchrun and 2 processes (issue 10), and prints exactly the
output docs/distributed.md shows (issue 42)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from _processes import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("engine", ["ddp", "fsdp2"])
def test_torchrun_data_parallel_example(engine, tmp_path):
    out = tmp_path / "checkpoint"
    result = subprocess.run(
        # The README runs it with --standalone; here the rendezvous gets its own free port on 127.0.0.1.
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--rdzv-backend", "c10d",
         "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--nproc-per-node", "2",
         str(ROOT / "examples" / "data_parallel.py"), "--engine", engine, "--out", str(out)],
        capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    shown = re.search(r"```text\n(step .*?)```", (ROOT / "docs" / "distributed.md").read_text(), flags=re.S).group(1)
    assert result.stdout == shown.replace("/tmp/slotopt-ckpt", str(out))  # the same for both engines
    assert (out / ".metadata").exists()
