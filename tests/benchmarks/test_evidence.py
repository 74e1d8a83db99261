"""benchmarks/evidence.py without a GPU: which cells a run's missed kernel targets send to Nsight
Compute, and how ncu's CSV becomes the report's evidence rows (a stand-in `ncu` on PATH prints
CSV in ncu's own layout for the cases it is given)."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import evidence  # noqa: E402

RUN = json.loads((REPO / "benchmarks/results/current/h100-run.json").read_text())


def test_the_worst_cell_of_each_missed_kernel_target_is_profiled() -> None:
    picked = {t: c for t, c, _ in evidence.cases(RUN, 90.0, 4096)}
    assert "quantize" not in picked  # every quantize cell >= 90% in that run
    dual = min((r for r in RUN["dual"] if r["M"] >= 4096), key=lambda r: r["pct_copy"])
    assert picked["dual"] == f"dual:{dual['format']}:{dual['M']}:{dual['K']}@{dual['layout']}"
    assert picked["grouped G=1024"].startswith("grouped:") and picked["grouped G=1024"].endswith(":1024")
    assert set(picked) >= {"dual", "columnwise", "rht", "rmsnorm", "add_rmsnorm"}
    # at a threshold every cell meets, only the G=1024 ratio target (always profiled) remains
    assert [t for t, _, _ in evidence.cases(RUN, 10.0, 4096)] == ["grouped G=1024"]


def test_ncu_csv_becomes_evidence_rows(tmp_path, monkeypatch) -> None:
    metrics = list(evidence.METRICS)
    fake = tmp_path / "ncu"
    # Prints, for each profile_kernels case given after the script, one ncu CSV row per metric.
    fake.write_text(f"""#!{sys.executable}
import sys
case = sys.argv[sys.argv.index({str(REPO / 'benchmarks' / 'profile_kernels.py')!r}) + 1]
metrics = {metrics!r}
print('==PROF== Connected to process')
print('"ID","Process ID","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')
for i in range(2 if case.startswith("col:") else 1):  # the columnwise case launches two kernels
    for j, m in enumerate(metrics):
        unit, value = ("ns", "12,500" if i == 0 else "1,000") if m == "gpu__time_duration.sum" else ("", str(j + 1))
        if "long_scoreboard" in m:
            value = "99"
        print(f'"{{i}}","1","kernel_{{i}}","1","7","(256, 1, 1)","(132, 1, 1)","0","9.0","Command line profiler metrics","{{m}}","{{unit}}","{{value}}"')
""")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    all_rows = evidence.evidence_rows(RUN, 90.0, 4096)
    rows, ref = all_rows[:-1], all_rows[-1]
    assert len(rows) == len(evidence.cases(RUN, 90.0, 4096)) >= 5
    # the same-size copy's clocks close the table; without a GPU every clock probe says why
    assert (ref["target"], ref["case"]) == ("copy (reference)", "copy:16384:8192")
    assert all(r["clocks"] == {"error": "no CUDA GPU"} for r in all_rows)
    elements = {c: n for _, c, n in evidence.cases(RUN, 90.0, 4096)}
    per_kernel = metrics.index("smsp__thread_inst_executed.sum") + 1
    for r in rows:
        two = r["case"].startswith("col:")
        assert (r["kernels"], r["us"]) == ((2, 13.5) if two else (1, 12.5)), r
        assert r["registers"] == metrics.index("launch__registers_per_thread") + 1
        assert r["instructions_per_element"] == per_kernel * (2 if two else 1) / elements[r["case"]]
        assert r["top_stalls"][0] == ("long_scoreboard", 99.0)
        # the longest kernel's issue and pipe shares (kernel 0: 12.5 us), not the sum over kernels
        issue, alu, fma = (metrics.index(m) + 1 for m in ("sm__inst_issued.avg.pct_of_peak_sustained_active",
                                                          "sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active",
                                                          "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active"))
        assert (r["issue_pct"], r["pipe_alu_pct"], r["pipe_fma_pct"]) == (issue, alu, fma)
    md = "\n".join(evidence.markdown(all_rows, "NVIDIA H100 80GB HBM3"))
    assert "long_scoreboard 99.00" in md and md.count("\n| ") == len(all_rows) + 1
    assert f"| {issue:.1f} | {alu:.1f} / {fma:.1f} |" in md
    header, rule = md.splitlines()[3:5]
    assert all(line.count("|") == rule.count("|") == header.count("|") for line in md.splitlines()[5:])
    assert "power-capped % of samples" in header and md.splitlines()[-1].endswith("| no CUDA GPU |")
    # a measured row: clock (lowest) / board watts / share of power-capped samples
    held = dict(all_rows[0], clocks={"sm_mhz": 1830.0, "sm_mhz_min": 1575.0, "power_w": 698.4,
                                     "power_capped_pct": 100.0})
    assert evidence.markdown([held], "x")[-1].endswith("| 1830 (1575) / 698 / 100 |")


def test_without_ncu_each_row_says_so(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(evidence, "ncu_path", lambda: None)
    rows = evidence.evidence_rows(RUN, 90.0, 4096)
    assert rows and all(r["error"] == "ncu not found" for r in rows)
    assert "not profiled: ncu not found" in "\n".join(evidence.markdown(rows, "x"))


def test_the_counters_command_names_each_case_and_scales_units(tmp_path) -> None:
    """`python benchmarks/evidence.py CASE ...` (device/ncu_release.sh): one ncu process per case,
    times and byte counts in the units ncu picked scaled to microseconds and bytes."""
    fake = tmp_path / "ncu"
    counters = list(evidence.COUNTERS)
    fake.write_text(f"""#!{sys.executable}
import sys
case = sys.argv[-1]
print('"ID","Process ID","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')
for m in {counters!r}:
    unit, value = {{"gpu__time_duration.sum": ("msecond", "0.18"), "dram__bytes_read.sum": ("Mbyte", "238.8"),
                    "dram__bytes_write.sum": ("Gbyte", "0.116")}}.get(m, ("", "4096" if "grid" in m else "2"))
    if "long_scoreboard" in m:
        value = "7.5" if case.endswith(":1024") else "3.5"
    print(f'"0","1","k","1","7","(128, 1, 1)","(4096, 1, 1)","0","9.0","Command line profiler metrics","{{m}}","{{unit}}","{{value}}"')
""")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    cases = ["grouped:nvfp4:16384:7168:1024", "grouped:nvfp4:16384:7168:64"]
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "evidence.py"), "--label", "rel", *cases],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split(" | ")[0] for line in lines] == [f"rel {c}" for c in cases]
    assert "| 180.0 us | DRAM read 238.8 MB write 116.0 MB |" in lines[0]
    assert "grid 4096" in lines[0] and "warp inst 0.00 M" in lines[0] and "| issue 2.0% ALU 2.0% FMA 2.0% |" in lines[0]
    assert lines[0].endswith("long_scoreboard 7.50, lg_throttle 2.00, math_pipe_throttle 2.00, wait 2.00")
    assert "long_scoreboard 3.50" in lines[1]


def test_clock_samples_are_summarized_after_the_settling_quarter() -> None:
    import _clocks

    # nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits: SM MHz, mem MHz, W, C, reasons
    lines = ["1980, 3201, 610.5, 48, 0x0000000000000000"] * 4 + [
        "1830, 3201, 698.7, 55, 0x0000000000000004",
        "1575, 3201, 699.1, 56, 0x0000000000000004",
        "1905, 3201, 697.0, 56, 0x0000000000000000",
        "[N/A], 3201, 699.0, 56, 0x4",  # a sample nvidia-smi could not read is dropped
    ]
    got = _clocks.summary("\n".join(lines) + "\n")
    # 7 readable samples, the first quarter (1) dropped: 3 at 1980 MHz and the 3 under load
    assert got["samples"] == 6
    assert (got["sm_mhz"], got["sm_mhz_min"], got["mem_mhz"]) == (1942.5, 1575.0, 3201.0)
    assert got["power_capped_pct"] == 100.0 * 2 / 6 and got["temp_c_max"] == 56.0
    assert got["reasons"] == ["0x0", "0x4"]
    assert _clocks.summary("") == {"samples": 0}
