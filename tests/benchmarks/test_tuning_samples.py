"""benchmarks/tuning_samples.py without a GPU: bad input and a missing GPU end in one line, exit 1."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "tuning_samples.py"
TABLE = REPO / "kernelforge" / "data" / "tuning" / "nvidia_h100_80gb_hbm3.sm_90a.json"


def _run(tmp_path: Path, table: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--cache", str(tmp_path / "cache"), "--table", str(table)],
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "",
                                                               "PYTHONPATH": str(REPO)}, timeout=300)


def test_a_file_that_is_not_a_table_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "table.json"
    bad.write_text('{"schema": 1, "device": "x"}')
    proc = _run(tmp_path, bad)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"tuning_samples: --table: {bad}: not a kernelforge tuning table (m_buckets: expected [256, 4096] "
        "(the M buckets this kernelforge dispatches on), found null)"]


def test_without_a_gpu_it_says_so_in_one_line(tmp_path: Path) -> None:
    proc = _run(tmp_path, TABLE)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == ["tuning_samples: needs a CUDA GPU (it times the cached kernels)"]
