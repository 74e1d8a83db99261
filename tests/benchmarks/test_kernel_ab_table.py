"""benchmarks/kernel_ab_table.py: per row, the median over rounds of each release, side by side."""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import kernel_ab_table  # noqa: E402


def _fused(op: str, fmt: str, m: int, h: int, us: float, pct: float) -> dict:
    return {"op": op, "format": fmt, "mode": "none", "layout": "swizzled", "M": m, "H": h, "us": us, "pct_copy": pct}


def test_fused_rows_take_each_releases_median_over_rounds(tmp_path: Path) -> None:
    rng = random.Random()
    times = {name: sorted(rng.uniform(100, 900) for _ in range(3)) for name in ("dist", "ab-c1")}
    for name, ts in times.items():
        for r, t in enumerate(rng.sample(ts, 3), 1):  # rounds in any order
            run = {"device": "NVIDIA H200", "copy_GBps": 4260.0,
                   "fused": [_fused("rmsnorm", "mxfp8", 16384, 32768, t, 4000.0 / t)]}
            (tmp_path / f"{name}.r{r}.json").write_text(json.dumps(run))
    text = kernel_ab_table.table(kernel_ab_table.load(tmp_path))
    row = next(line for line in text.splitlines() if line.startswith("| rmsnorm mxfp8 swizzled 16384x32768 |"))
    cells = [c.strip() for c in row.strip("|").split("|")][1:]
    assert cells == [f"{ts[1]:.1f} ({4000.0 / ts[1]:.1f})" for ts in (times["ab-c1"], times["dist"])]
    assert text.startswith("device: NVIDIA H200")
