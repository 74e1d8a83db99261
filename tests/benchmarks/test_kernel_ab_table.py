"""benchmarks/kernel_ab_table.py: per row, the median over rounds of each release, side by side, and per kind
of row each release's change against the base."""
from __future__ import annotations

import json
import random
import statistics
import sys
from pathlib import Path

import pytest

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


def _dual(fmt: str, layout: str, m: int, pct: float, col_pct: float) -> dict:
    return {"format": fmt, "layout": layout, "M": m, "K": 7168, "dual_us": 100.0, "pct_copy": pct,
            "columnwise_us": 50.0, "columnwise_pct_copy": col_pct}


def test_summary_gives_each_kind_of_rows_change_against_the_base(tmp_path: Path) -> None:
    """Per op and format: min / max / mean over the rows of (tree's median % of copy - base's), the
    base chosen by name whatever the column order; a row only one tree measured is left out."""
    rng = random.Random()
    cells = [(fmt, layout, m) for fmt in ("mxfp8", "nvfp4") for layout in ("linear", "swizzled") for m in (4096, 8192)]
    pct = {(tree, c): [rng.uniform(50, 95) for _ in range(3)] for tree in ("a-new", "rel-p") for c in cells}
    for tree in ("a-new", "rel-p"):
        for r in range(3):
            rows = [_dual(*c, pct[tree, c][r], pct[tree, c][r] + 5) for c in cells]
            if tree == "a-new" and r == 0:
                rows.append(_dual("mxfp4", "linear", 4096, 70.0, 80.0))  # the base has no such row
            (tmp_path / f"{tree}.r{r + 1}.json").write_text(json.dumps({"device": "NVIDIA H200", "copy_GBps": 4260.0,
                                                                         "dual": rows}))
    runs = kernel_ab_table.load(tmp_path)
    assert list(runs) == ["a-new", "rel-p"]
    text = kernel_ab_table.summary(runs, base="rel-p")
    assert text.startswith("change in points of % of copy against rel-p")
    lines = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in text.splitlines() if line.startswith("| ")}
    assert lines["rows"] == "a-new"
    for fmt in ("mxfp8", "nvfp4"):
        d = [statistics.median(pct["a-new", c]) - statistics.median(pct["rel-p", c]) for c in cells if c[0] == fmt]
        want = f"{min(d):+.1f} / {max(d):+.1f} / {statistics.mean(d):+.1f} (4)"
        assert lines[f"dual {fmt}"] == want
        assert lines[f"columnwise {fmt}"] == want  # the columnwise figures are the dual ones + 5 in both trees
    assert lines["dual mxfp4"] == "-"
    with pytest.raises(ValueError, match="--base: no tree named 'rel-q'"):
        kernel_ab_table.summary(runs, base="rel-q")


def test_cli_prints_table_and_summary_and_rejects_an_empty_source(tmp_path: Path) -> None:
    import subprocess

    script = REPO / "benchmarks" / "kernel_ab_table.py"
    empty = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True)
    assert empty.returncode == 2 and "src: no <tree>.r<round>.json results" in empty.stderr
    gone = subprocess.run([sys.executable, str(script), str(tmp_path / "nope.tar.gz")], capture_output=True, text=True)
    assert gone.returncode == 2 and "does not exist" in gone.stderr and "Traceback" not in gone.stderr
    for tree, p in (("rel-p", 80.0), ("try", 83.5)):
        (tmp_path / f"{tree}.r1.json").write_text(json.dumps({"device": "NVIDIA H200", "copy_GBps": 4260.0,
                                                              "dual": [_dual("mxfp8", "linear", 4096, p, p)]}))
    out = subprocess.run([sys.executable, str(script), str(tmp_path), "--base", "rel-p"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "| dual mxfp8 | +3.5 / +3.5 / +3.5 (1) |" in out.stdout
    bad = subprocess.run([sys.executable, str(script), str(tmp_path), "--base", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--base: no tree named 'nope'" in bad.stderr and "Traceback" not in bad.stderr
