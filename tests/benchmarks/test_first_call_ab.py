"""benchmarks/first_call_ab.py without a GPU: the sources it alternates, its summary against an
independent computation on random samples, and its one-line argument errors. The children run
on the GPU machine (`device/first_call_ab.sh`)."""
from __future__ import annotations

import random
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import first_call_ab  # noqa: E402


def test_every_site_is_measured_from_its_wheel_and_from_the_directory(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("KERNELFORGE_CACHE_DIR", "/somewhere/else")
    monkeypatch.setenv("PYTHONPATH", "/a/checkout")
    envs = first_call_ab.sources({"old": "/s/old", "new": "/s/new"}, str(tmp_path))
    assert sorted(envs) == ["new directory", "new wheel", "old directory", "old wheel"]
    for name, env in envs.items():
        site = "/s/" + name.split()[0]
        assert env["PYTHONPATH"] == site
        assert env.get("KERNELFORGE_CACHE_DIR") == (str(tmp_path) if name.endswith("directory") else None)


def test_the_summary_is_the_difference_of_the_medians() -> None:
    rng = random.Random()
    samples = {f"{s} {k}": [rng.uniform(15, 50) for _ in range(rng.randint(3, 15))]
               for s in ("a", "b") for k in ("wheel", "directory")}
    res = first_call_ab.summary(samples, ["a", "b"])
    for site in ("a", "b"):
        want = statistics.median(samples[f"{site} wheel"]) - statistics.median(samples[f"{site} directory"])
        assert abs(res["wheel_minus_directory_ms"][site] - want) < 1e-9
    for name, values in samples.items():
        s = res["sources"][name]
        assert (s["min"], s["max"], s["n"]) == (min(values), max(values), len(values))
        assert sorted(values)[(len(values) - 1) // 2] <= s["median"] <= sorted(values)[len(values) // 2]


def test_bad_arguments_get_one_line(tmp_path) -> None:
    script = str(REPO / "benchmarks" / "first_call_ab.py")
    for args, needle in ((["--site", "nodir", "--cache-dir", str(tmp_path)], "--site: expected NAME=DIR"),
                         (["--site", f"a={tmp_path}/missing", "--cache-dir", str(tmp_path)], "--site: expected"),
                         (["--site", f"a={tmp_path}", "--cache-dir", f"{tmp_path}/missing"], "--cache-dir: expected")):
        proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True)
        assert proc.returncode == 1 and needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
