"""benchmarks/tuning_ab.py: the tuner's timings of two tables as a kernel A/B."""
from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import tuning_ab  # noqa: E402


def table(times: dict[str, dict[str, list[dict[str, float]]]], samples=(128, 2048, 16384)) -> dict:
    return {"bucket_sample_m": list(samples), "timings_us": times}


def test_ratios_take_each_tables_best_candidate(tmp_path) -> None:
    rng = random.Random()
    a, b, c, d = (rng.uniform(5, 50) for _ in range(4))
    old = table({"rms|x=1": {"h1k": [{"32": a, "64": b}, {"32": 2 * a, "64": 2 * b}, {}]},
                 "quantize|x=1": {"any": [{"t": 1.0}, {"t": 1.0}, {"t": 1.0}]}})
    new = table({"rms|x=1": {"h1k": [{"32": c, "64": d}, {"32": 3 * c, "64": 3 * d}, {"32": 1.0}]},
                 "quantize|x=1": {"any": [{"t": 9.0}, {"t": 9.0}, {"t": 9.0}]}})
    found = tuning_ab.ratios(old, new, "rms")
    # the bucket the old table did not time is left out; the other op is not counted
    assert set(found) == {("h1k", 128), ("h1k", 2048)}
    assert found[("h1k", 128)] == [min(c, d) / min(a, b)]
    assert found[("h1k", 2048)] == [3 * min(c, d) / (2 * min(a, b))]
    text = "\n".join(tuning_ab.report(found))
    assert "h1k    M=   128" in text and "of 2" in text

    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    run = [sys.executable, str(REPO / "benchmarks" / "tuning_ab.py"), str(tmp_path / "old.json"), str(tmp_path / "new.json")]
    proc = subprocess.run([*run, "--op", "rms"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.splitlines()[1].startswith("  h1k    M=   128")
    proc = subprocess.run([*run, "--op", "nothing"], capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.strip() == "tuning_ab: no dispatch group of nothing is timed in both tables"


def test_tables_sampled_at_other_m_do_not_compare() -> None:
    old = table({"rms|x=1": {"h1k": [{"32": 1.0}]}}, samples=(128, 1024, 16384))
    new = table({"rms|x=1": {"h1k": [{"32": 1.0}]}})
    try:
        tuning_ab.ratios(old, new, "rms")
    except ValueError as exc:
        assert "sample different M" in str(exc)
    else:
        raise AssertionError("tables with other sample M were compared")
