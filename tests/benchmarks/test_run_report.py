"""benchmarks/run.py without a GPU: the targets table, the markdown report and `--plots-from`.

The fixture is a made-up but plausible run (numbers in the range of the H100 figures in
docs/performance.md), with some targets met and some missed; each check is also flipped by
changing one number.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUN_PY = REPO / "benchmarks" / "run.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DEVICE = "NVIDIA H100 80GB HBM3"


def _load_run():
    spec = importlib.util.spec_from_file_location("kf_benchmarks_run", RUN_PY)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


run = _load_run()

OPS = ("quantize_mxfp8", "quantize_nvfp4", "quantize_dual", "quantize_nvfp4_rht", "rmsnorm_quantize",
       "add_rmsnorm_quantize", "quantize_experts", "quantize_grouped")


def _q(fmt, layout, m, k, us, pct):
    return {"format": fmt, "mode": "none" if fmt == "nvfp4" else "floor", "layout": layout, "M": m, "K": k, "us": us,
            "GBps": 30.05 * pct, "pct_copy": pct, "device": DEVICE}


def _dual(fmt, layout, m, k, pct, col_pct, speedup):
    dual_us = 150.0
    return {"section": "dual", "format": fmt, "layout": layout, "M": m, "K": k, "dual_us": dual_us,
            "two_calls_us": dual_us * speedup, "rowwise_us": 110.0, "columnwise_us": 112.0, "speedup": speedup,
            "GBps": 30.05 * pct, "pct_copy": pct, "columnwise_pct_copy": col_pct, "device": DEVICE}


def _rht(layout, outputs, pct):
    return {"section": "rht", "format": "nvfp4", "layout": layout, "outputs": outputs, "M": 16384, "K": 8192,
            "fused_us": 185.7 if outputs == "both" else 132.0, "unfused_us": 2600.0, "unfused_butterfly_us": None,
            "speedup": 14.0, "GBps": 30.05 * pct, "pct_copy": pct, "device": DEVICE}


def _grp(fmt, g, pct, speedup):
    return {"section": "grouped", "kind": "offsets", "format": fmt, "shape": f"16384x7168 G={g}", "mode": "floor",
            "layout": "swizzled", "T": 16384, "K": 7168, "G": g, "grouped_us": 130.0, "loop_us": 130.0 * speedup,
            "speedup": speedup, "GBps": 30.05 * pct, "pct_copy": pct, "device": DEVICE}


def _fused(op, fmt, m, h, pct):
    return {"op": op, "format": fmt, "mode": "none", "layout": "swizzled", "M": m, "H": h, "us": 100.0,
            "GBps": 30.05 * pct, "pct_copy": pct, "unfused_us": 250.0, "speedup_vs_unfused": 2.5, "device": DEVICE}


def make_results() -> dict:
    first = dict(zip(OPS, (205.3, 238.1, 264.8, 266.0, 260.7, 198.1, 182.0, 226.3)))
    further = dict(zip(OPS, (3.61, 1.27, 1.51, 5.43, 4.08, 2.09, 3.22, 1.51)))
    return {
        "schema": 1, "command": "python benchmarks/run.py", "date": "2026-11-26", "device": DEVICE,
        "torch": "2.11.0+cu130", "cuda": "13.0", "quick": False, "copy_GBps": 3005.0,
        "wall_s": {"startup": 112.0, "host": 1.0, "quantize": 2.0, "dual": 5.0, "rht": 3.0, "grouped": 6.0,
                   "fused": 12.0, "total": 147.0},
        "errors": {},
        "startup": {"device": DEVICE, "torch": "2.11.0+cu130", "runs": 5,
                    "median": {"first_ms": first, "further_ms": further,
                               "host": {"allocating_us": 13.05, "out_us": 6.07, "torch_add_out_us": 5.91,
                                        "rmsnorm_out_us": 6.31, "dual_out_us": 7.70, "rht_out_us": 7.53,
                                        "grouped_us": 22.86}}},
        "host": {"quantize": {"direct_us": 5.0, "quantize_out_us": 6.07, "quantize_alloc_us": 13.05,
                              "overhead_out_us": 1.07, "overhead_alloc_us": 8.05},
                 "fused": {"direct_us": 5.01, "python_out_us": 6.63, "python_alloc_us": 18.81, "custom_op_us": 28.0,
                           "overhead_out_us": 1.62},
                 "device": DEVICE},
        "quantize": [_q("mxfp8", "linear", 1024, 4096, 5.0, 85.3), _q("nvfp4", "swizzled", 1024, 4096, 5.9, 60.5),
                     _q("mxfp8", "linear", 4096, 7168, 31.0, 97.2), _q("mxfp8", "swizzled", 4096, 7168, 34.9, 86.3),
                     _q("mxfp4", "linear", 16384, 8192, 112.4, 102.2),
                     _q("nvfp4", "swizzled", 16384, 8192, 117.0, 99.4)],
        "dual": [_dual("mxfp8", "swizzled", 4096, 7168, 90.6, 92.4, 1.53),
                 _dual("mxfp8", "linear", 16384, 8192, 93.5, 96.7, 1.46),
                 _dual("mxfp8", "swizzled", 16384, 8192, 93.0, 96.5, 1.47),
                 _dual("nvfp4", "linear", 16384, 8192, 88.0, 98.9, 1.45),
                 _dual("nvfp4", "swizzled", 16384, 8192, 91.2, 97.0, 1.47)],
        "rht": [_rht("linear", "both", 73.0), _rht("linear", "columnwise", 90.4),
                _rht("swizzled", "both", 75.1), _rht("swizzled", "columnwise", 91.3)],
        "grouped": [{"section": "grouped", "kind": "experts", "format": "mxfp8", "shape": "8x4096x7168",
                     "E": 8, "N": 4096, "K": 7168, "grouped_us": 241.3, "loop_us": 265.8, "speedup": 1.10,
                     "GBps": 2948.0, "pct_copy": 98.1, "device": DEVICE},
                    _grp("mxfp8", 8, 90.8, 1.15), _grp("nvfp4", 8, 71.0, 0.80), _grp("mxfp8", 64, 92.0, 2.2),
                    _grp("mxfp8", 1024, 60.0, 8.5)],
        "fused": [_fused("rmsnorm", "nvfp4", 16384, 8192, 96.5), _fused("rmsnorm", "mxfp4", 16384, 1536, 78.8),
                  _fused("rmsnorm", "mxfp8", 4096, 4096, 83.2)],
    }


def _find(ts: list[dict], family: str, words: str) -> dict:
    hits = [t for t in ts if t["family"] == family and words in t["target"]]
    assert len(hits) == 1, (family, words, [t["target"] for t in ts])
    return hits[0]


# (family, words of the target, value, worst cell, met, cells met, cells)
EXPECTED = [
    ("startup", "first call of the first op", 266.0, "quantize_nvfp4_rht", False, 0, 8),
    ("startup", "each further op", 5.43, "quantize_nvfp4_rht", False, 3, 8),
    ("host", "allocating", 13.05, "quantize mxfp8", False, 0, 1),
    ("host", "torch.add(out=)", 0.16, None, True, 1, 1),
    ("dual", "every format and layout", 88.0, "nvfp4 linear", False, 3, 4),
    ("columnwise", "columnwise-only", 96.5, "mxfp8 swizzled", True, 4, 4),
    ("rht", "both outputs", 73.0, "linear", False, 0, 2),
    ("rht", "columnwise only", 90.4, "linear", True, 2, 2),
    ("grouped", "G <= 64", 71.0, "nvfp4 G=8", False, 2, 3),
    ("grouped", "faster than a loop", 0.80, "nvfp4 G=8", False, 3, 4),
    ("quantize", "1024x4096", 5.9, "nvfp4 swizzled", True, 2, 2),
    ("quantize", "4096x7168 and above", 86.3, "mxfp8 swizzled 4096x7168", False, 3, 4),
    ("dual", ">= 1.4x", 1.45, "nvfp4 linear 16384x8192", True, 5, 5),
    ("fused", "M >= 16384", 78.8, "rmsnorm mxfp4 16384x1536", False, 1, 2),
    ("host", "direct kernel call", 1.62, "rmsnorm_quantize 128x1024", False, 1, 2),
]


def test_targets_table_values_and_verdicts():
    ts = run.targets(make_results())
    assert len(ts) == len(EXPECTED)
    for family, words, value, worst, met, cells_met, cells in EXPECTED:
        t = _find(ts, family, words)
        assert t["value"] == pytest.approx(value), (family, words)
        if worst is not None:
            assert t["worst"] == worst, (family, words)
        assert (t["met"], t["cells_met"], t["cells"]) == (met, cells_met, cells), (family, words)
        assert t["device"] == DEVICE


def _set(res: dict, section: str, match: dict, key: str, value: float) -> None:
    rows = [r for r in res[section] if all(r.get(k) == v for k, v in match.items())]
    assert len(rows) == 1, (section, match)
    rows[0][key] = value


# One number changed -> the target's verdict and measured value change (both directions).
FLIPS = [
    ("quantize", "1024x4096", lambda r: _set(r, "quantize", {"format": "nvfp4", "M": 1024}, "us", 6.4), 6.4, False),
    ("quantize", "4096x7168 and above",
     lambda r: _set(r, "quantize", {"format": "mxfp8", "layout": "swizzled", "M": 4096}, "pct_copy", 97.5), 97.2, True),
    ("dual", "every format and layout",
     lambda r: _set(r, "dual", {"format": "nvfp4", "layout": "linear"}, "pct_copy", 91.0), 91.0, True),
    ("columnwise", "columnwise-only",
     lambda r: _set(r, "dual", {"format": "mxfp8", "layout": "swizzled", "M": 16384}, "columnwise_pct_copy", 89.0),
     89.0, False),
    ("rht", "both outputs", lambda r: [_set(r, "rht", {"layout": lay, "outputs": "both"}, "pct_copy", v)
                                       for lay, v in (("linear", 86.0), ("swizzled", 85.5))], 85.5, True),
    ("grouped", "faster than a loop", lambda r: _set(r, "grouped", {"format": "nvfp4", "G": 8}, "speedup", 1.05),
     1.05, True),
    ("host", "allocating", lambda r: r["startup"]["median"]["host"].update(allocating_us=9.5), 9.5, True),
    ("host", "torch.add(out=)", lambda r: r["startup"]["median"]["host"].update(out_us=7.5), 1.59, False),
    ("startup", "first call of the first op",
     lambda r: r["startup"]["median"]["first_ms"].update({op: 20.0 + i for i, op in enumerate(OPS)}), 27.0, True),
]


@pytest.mark.parametrize("family, words, change, value, met", FLIPS)
def test_changing_one_number_flips_the_verdict(family, words, change, value, met):
    res = make_results()
    before = _find(run.targets(res), family, words)
    assert before["met"] is not met
    change(res)
    after = _find(run.targets(res), family, words)
    assert after["met"] is met
    assert after["value"] == pytest.approx(value)
    row = next(line for line in run.markdown({**res, "targets": run.targets(res)}, []).splitlines()
               if line.startswith("| ") and after["target"] in line)
    assert row.endswith("| yes |" if met else "| **no** |")
    assert f"{value:.2f} {after['unit']}" in row


def test_faster_than_the_loop_is_strict():
    res = make_results()
    _set(res, "grouped", {"format": "nvfp4", "G": 8}, "speedup", 1.0)
    t = _find(run.targets(res), "grouped", "faster than a loop")
    assert (t["value"], t["met"], t["cells_met"]) == (1.0, False, 3)


def test_a_missing_section_is_not_met():
    res = make_results()
    del res["rht"]
    res["errors"]["rht"] = "Traceback (most recent call last):\nRuntimeError: CUDA error: out of memory\n"
    t = _find(run.targets(res), "rht", "both outputs")
    assert (t["value"], t["met"], t["cells"], t["worst"]) == (None, False, 0, "not measured")
    md = run.markdown(res, run.plot_names(res))
    assert "Not measured: the section failed (RuntimeError: CUDA error: out of memory)." in md
    assert "### Errors" in md and "pct_copy_rht.png" not in md
    assert "| not measured | 0 of 0 | **no** |" in md


SECTIONS = ("### Targets", "### Startup and host cost per call", "### Quantize", "### Dual and columnwise-only",
            "### NVFP4 RHT", "### Grouped", "### Fused RMSNorm + quantize")
PNGS = ("pct_copy_quantize.png", "pct_copy_dual.png", "pct_copy_columnwise.png", "pct_copy_rht.png",
        "pct_copy_grouped.png", "pct_copy_fused.png", "startup_first_call.png")


def test_markdown_has_every_section_and_embeds_the_plots():
    res = make_results()
    res["targets"] = run.targets(res)
    assert sorted(run.plot_names(res)) == sorted(PNGS)
    md = run.markdown(res, run.plot_names(res))
    assert md.startswith(f"## 2026-11-26 — `python benchmarks/run.py`, {DEVICE} (torch 2.11.0+cu130)")
    pos = [md.index(s) for s in SECTIONS]
    assert pos == sorted(pos)
    for name in PNGS:
        assert f"](results/current/{name})" in md
    assert md.count("![") == len(PNGS)
    every = res["targets"] + run.hopper_targets(res)  # the issue 33 table follows the first one
    assert md.count("| **no** |") == sum(not t["met"] for t in every)
    assert md.count("| yes |") == sum(t["met"] for t in every)
    assert "| nvfp4 | linear | 16384x8192 | 150.0 | 88.0 |" in md  # a dual row
    assert "| offsets | mxfp8 | 16384x7168 G=1024 | 130.0 | 60.0 | 1105.0 | 8.50 |" in md
    # a plot that was not drawn is not embedded; the embed folder is an argument
    md2 = run.markdown(res, ["pct_copy_dual.png"], embed_dir="results/2026-11-26")
    assert md2.count("![") == 1 and "](results/2026-11-26/pct_copy_dual.png)" in md2


def test_plot_data_one_line_per_format_and_layout():
    data = run.plot_data(make_results())
    dual = data["pct_copy_dual.png"]
    assert dual["x"] == ["4096x7168", "16384x8192"]
    assert dual["series"]["nvfp4 linear"] == [None, 88.0]
    assert dual["targets"][0][0] == 90.0
    assert data["pct_copy_columnwise.png"]["series"]["mxfp8 linear"] == [None, 96.7]
    grouped = data["pct_copy_grouped.png"]
    assert grouped["x"] == ["G=8", "G=64", "G=1024"] and grouped["series"]["mxfp8 swizzled"] == [90.8, 92.0, 60.0]
    assert sorted(t[0] for t in data["pct_copy_rht.png"]["targets"]) == [85.0, 90.0]


def test_device_slug_and_report_name():
    assert run.device_slug("NVIDIA H100 80GB HBM3") == "h100-80gb-hbm3"
    assert run.device_slug("") == "unknown-device"
    assert run.report_name(make_results(), "md") == "run-2026-11-26-h100-80gb-hbm3.md"


def test_full_plan_covers_every_issue_19_row():
    full = run.PLANS["full"]
    assert tuple(run.BIG) in map(tuple, full["dual"]) and tuple(run.BIG) in map(tuple, full["rht"])
    assert {g for t, k, g in full["grouped_offsets"] if (t, k) == run.GROUPED_TK} == {8, 64, 1024}
    assert tuple(run.SMALL) in map(tuple, full["quantize"])
    assert {(4096, 7168), (8192, 7168), (16384, 8192)} <= set(map(tuple, full["quantize"]))
    assert full["startup_runs"] >= 5


def _run_cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, str(RUN_PY), *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=300)


@pytest.fixture
def saved_run(tmp_path: Path) -> Path:
    p = tmp_path / "run.json"
    p.write_text(json.dumps(make_results()))
    return p


def test_importing_run_py_loads_no_gpu_code():
    code = (f"import importlib.util, sys; s = importlib.util.spec_from_file_location('r', {str(RUN_PY)!r}); "
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); "
            "print(sorted(n for n in sys.modules if n.split('.')[0] in "
            "('kernelforge', 'bench_startup', 'bench_training', 'bench_quantize', 'bench_fused', '_timing', 'matplotlib')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_plots_from_writes_the_report_without_appending(saved_run: Path, tmp_path: Path):
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n")
    before = saved_run.read_text()
    proc = _run_cli("--plots-from", str(saved_run), "--out-dir", str(tmp_path / "out"), "--no-append",
                    "--results", str(results))
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "out" / "run-2026-11-26-h100-80gb-hbm3.md").read_text()
    for s in SECTIONS:
        assert s in md
    assert "| **no** |" in md and "| yes |" in md
    assert results.read_text() == "# Benchmark results\n"
    assert saved_run.read_text() == before  # the input is not rewritten
    assert "targets met: 5 of 15" in proc.stdout


def test_plots_from_embeds_existing_pngs_without_matplotlib(saved_run: Path, tmp_path: Path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "pct_copy_dual.png").write_bytes(PNG_MAGIC + b"copied from the GPU machine")
    blocker = tmp_path / "no_mpl"
    (blocker / "matplotlib").mkdir(parents=True)
    (blocker / "matplotlib" / "__init__.py").write_text("raise ImportError('matplotlib blocked by the test')\n")
    env_path = os.pathsep.join(p for p in (str(blocker), os.environ.get("PYTHONPATH", "")) if p)
    proc = subprocess.run([sys.executable, str(RUN_PY), "--plots-from", str(saved_run), "--out-dir", str(out),
                           "--no-append"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": env_path})
    assert proc.returncode == 0, proc.stderr
    assert "matplotlib is not importable" in proc.stdout
    md = (out / "run-2026-11-26-h100-80gb-hbm3.md").read_text()
    assert md.count("![") == 1 and "](results/current/pct_copy_dual.png)" in md


def test_plots_from_appends_to_results(saved_run: Path, tmp_path: Path):
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n")
    proc = _run_cli("--plots-from", str(saved_run), "--out-dir", str(tmp_path / "out"), "--results", str(results))
    assert proc.returncode == 0, proc.stderr
    text = results.read_text()
    assert text.startswith("# Benchmark results\n\n## 2026-11-26 — `python benchmarks/run.py`")
    assert "### Targets" in text


def test_plots_from_writes_png_files(saved_run: Path, tmp_path: Path):
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("matplotlib is not importable in this environment: the PNG output is not checked (pip install matplotlib)")
    out = tmp_path / "out"
    proc = _run_cli("--plots-from", str(saved_run), "--out-dir", str(out), "--no-append",
                    "--results", str(tmp_path / "RESULTS.md"))
    assert proc.returncode == 0, proc.stderr
    for name in PNGS:
        data = (out / name).read_bytes()
        assert len(data) > 1000 and data.startswith(PNG_MAGIC), name
    md = (out / "run-2026-11-26-h100-80gb-hbm3.md").read_text()
    for name in PNGS:
        assert f"](results/current/{name})" in md


def test_measuring_needs_a_gpu(tmp_path: Path):
    proc = _run_cli("--quick", "--out-dir", str(tmp_path), "--no-append")
    assert proc.returncode != 0
    assert "needs a CUDA GPU" in proc.stderr


def _hopper(ts: list[dict], family: str, words: str) -> dict:
    found = [t for t in ts if t["family"] == family and words in t["target"]]
    assert len(found) == 1, (family, words, [t["target"] for t in ts])
    return found[0]


def test_issue_33_targets_follow_the_card():
    """The share-of-copy target is 90% on the H100 and 85% on the H200; the 1024x4096 latency
    target is the H100's only; the tuning-table row says whether this card has a committed table."""
    res = make_results()
    h100 = run.hopper_targets(res, table_devices={DEVICE})
    assert all(t["issue"] == 33 and t["device"] == DEVICE for t in h100)
    assert _hopper(h100, "quantize", "M >= 4096")["limit"] == 90.0
    assert _hopper(h100, "quantize", "1024x4096")["limit"] == 5.5
    assert _hopper(h100, "tuning", "committed tuning table")["met"] is True
    res["device"] = "NVIDIA H200"
    h200 = run.hopper_targets(res, table_devices={DEVICE})
    assert _hopper(h200, "quantize", "M >= 4096")["limit"] == 85.0
    assert not [t for t in h200 if "1024x4096" in t["target"]]
    tuning = _hopper(h200, "tuning", "committed tuning table")
    assert (tuning["met"], tuning["value"]) == (False, 0.0)


def test_issue_33_share_of_copy_counts_every_cell_at_m_4096_and_above():
    res = make_results()
    t = _hopper(run.hopper_targets(res, table_devices=set()), "quantize", "M >= 4096")
    want = [r for r in res["quantize"] if r["M"] >= 4096]
    assert t["cells"] == len(want) and t["value"] == pytest.approx(min(r["pct_copy"] for r in want))
    for r in want:
        r["pct_copy"] = 90.0
    assert _hopper(run.hopper_targets(res, table_devices=set()), "quantize", "M >= 4096")["met"] is True
    want[0]["pct_copy"] = 89.9
    assert _hopper(run.hopper_targets(res, table_devices=set()), "quantize", "M >= 4096")["met"] is False


def test_issue_33_rows_this_command_does_not_measure_are_not_met():
    ts = run.hopper_targets(make_results(), table_devices=set())
    for words in ("eager grouped call", "within 2 ms of the same call"):
        t = next(t for t in ts if words in t["target"])
        assert (t["value"], t["cells"], t["met"]) == (None, 0, False)


def test_issue_33_table_is_in_the_report():
    res = make_results()
    md = run.markdown({**res, "targets": run.targets(res), "hopper_targets": run.hopper_targets(res, set())}, [])
    assert "### Targets of issue 33 (H100," in md
    assert "| an eager grouped call (event-timed, out= given) within 15 us of its graph-replayed time | not measured |" in md


def test_issue_33_eager_grouped_and_wheel_rows_use_their_measurements():
    res = make_results()
    offsets = [r for r in res["grouped"] if r.get("kind") == "offsets"]
    for i, r in enumerate(offsets):
        r["eager_over_graph_us"] = 10.0 + i
    res["startup_layers"] = {"op": "quantize_mxfp8", "median_ms": {"layers": 30.0, "cache_dir": 27.5},
                             "layers_minus_cache_dir_ms": 2.5}
    ts = run.hopper_targets(res, table_devices=set())
    eager = _hopper(ts, "grouped", "eager grouped call")
    assert (eager["cells"], eager["value"]) == (len(offsets), 10.0 + len(offsets) - 1)
    assert eager["met"] is (10.0 + len(offsets) - 1 <= 15.0)
    wheel = _hopper(ts, "startup", "within 2 ms of the same call")
    assert (wheel["value"], wheel["met"]) == (2.5, False)
    assert "30.0 vs 27.5 ms" in wheel["worst"]
    res["startup_layers"]["layers_minus_cache_dir_ms"] = 1.5
    assert _hopper(run.hopper_targets(res, table_devices=set()), "startup", "within 2 ms")["met"] is True


def test_tiny_tensor_targets_check_the_host_cost_and_the_sustained_loop() -> None:
    res = make_results()
    host = res["startup"]["median"]["host"]  # out= 6.07, allocating 13.05, torch.add 5.91 (host time per call)
    ts = run.hopper_targets(res, table_devices=set())
    out, alloc = _hopper(ts, "host", "out=: <="), _hopper(ts, "host", "allocating: <=")
    assert (out["cells"], alloc["cells"]) == (1, 1)  # a run without the loop: the host cost alone
    assert out["met"] is True and alloc["met"] is False
    host.update(loop_out_us=9.0, loop_allocating_us=12.0, loop_torch_add_out_us=8.5)
    ts = run.hopper_targets(res, table_devices=set())
    out, alloc = _hopper(ts, "host", "out=: <="), _hopper(ts, "host", "allocating: <=")
    assert (out["cells"], out["cells_met"], out["met"]) == (2, 2, True)
    host.update(loop_out_us=9.5)  # 1.12x torch.add in the loop: the loop cell alone misses
    out = _hopper(run.hopper_targets(res, table_devices=set()), "host", "out=: <=")
    assert (out["cells_met"], out["met"]) == (1, False) and out["worst"].startswith("2000-call loop")
    assert alloc["value"] == 13.05 / 5.91  # the worst of the two cells


def test_plan_of_replaces_only_the_fused_shapes():
    full = run.PLANS["full"]
    assert run.plan_of(False) == full and run.plan_of(True) == run.PLANS["quick"]
    ab = run.plan_of(False, [4096, 65536], [32768])
    assert ab["fused_m"] == [4096, 65536] and ab["fused_h"] == [32768]
    assert {k: v for k, v in ab.items() if not k.startswith("fused_")} == \
        {k: v for k, v in full.items() if not k.startswith("fused_")}
    assert run.plan_of(False, None, [1536])["fused_m"] == full["fused_m"]
    assert full["fused_h"] == [1536, 4096, 8192, 16384, 32768]  # the plan itself is not changed
