"""benchmarks/bench_resolve.py: the pick of fresh processes on a cache, as the runtime makes it."""
from __future__ import annotations

import sys
from pathlib import Path

from kernelforge.build.tables import publish_table
from tests.runtime.test_tuning import COORDS, GROUP, H100, _table, cache  # noqa: F401  (cache: a fixture)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench_resolve  # noqa: E402


def test_fresh_processes_pick_the_tables_choice_else_the_heuristic(cache):  # noqa: F811
    publish_table(cache, _table({GROUP: {"h8k": [{"elements": 64, "ctas_per_row": 1}] * 3}}))
    tuned = bench_resolve.measure(str(cache.root), 2, H100, "rmsnorm_quantize", COORDS, k=8192, m=100)
    assert tuned["chosen"].endswith(".h8k.sm_90a.e64c1") and tuned["how"].startswith("tuning table of " + H100)
    assert tuned["runs"] == 2 and tuned["candidates_ms"] > 0 and tuned["pick_ms"] > 0
    other = bench_resolve.measure(str(cache.root), 1, "NVIDIA H200", "rmsnorm_quantize", COORDS, k=8192, m=100)
    assert other["chosen"].endswith(".e32c1") and other["how"].startswith("heuristic")
