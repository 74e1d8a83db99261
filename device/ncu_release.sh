#!/usr/bin/env bash
# One device-tool call: Nsight Compute counters of kernel cases (KF_NCU_CASES, benchmarks/
# profile_kernels.py syntax) on pip-installed release wheels, one release after another
# (KF_RELEASES: carry folders, as for wheel_ab.sh). Per release and case: GPU time, DRAM bytes read
# and written, achieved occupancy, registers, grid, warp instructions and the warp stall reasons
# that benchmarks/evidence.py reports. Writes $OUT/ncu_<release>.csv and prints one line per case.
set -uo pipefail
KF_INSTALL_LATER=1 source "$(dirname "$0")/wheel_node.sh"
read -r -a releases <<< "${KF_RELEASES:-.carry/dist}"
stalls="long_scoreboard lg_throttle math_pipe_throttle wait not_selected short_scoreboard mio_throttle barrier"
metrics="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,\
sm__warps_active.avg.pct_of_peak_sustained_active,sm__maximum_warps_per_active_cycle_pct,\
launch__registers_per_thread,launch__grid_size,smsp__inst_executed.sum"
for s in $stalls; do metrics="$metrics,smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio"; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
rc=0
for rel in "${releases[@]}"; do
  name="$(basename "$rel")"
  install_wheels "$REPO/$rel" "/tmp/kf-site-$name" || exit 3
  # shellcheck disable=SC2086  # KF_NCU_CASES: several cases
  PYTHONPATH="/tmp/kf-site-$name" ncu --clock-control none --nvtx --nvtx-include "kf/" --metrics "$metrics" --csv \
    python3 "$REPO/benchmarks/profile_kernels.py" ${KF_NCU_CASES:?KF_NCU_CASES: profile_kernels.py cases} \
    > "$OUT/ncu_$name.csv" 2>&1 || rc=1
  python3 - "$OUT/ncu_$name.csv" "$name" <<'PY'
import csv, sys
from collections import defaultdict
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows:
    print(open(sys.argv[1]).read()[-3000:]); sys.exit()
h = rows[0]
col = {k: h.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Value")}
ranges = [i for i, k in enumerate(h) if k.startswith("thread_domain") or k == "NVTX"]
by_id = defaultdict(dict)
for r in rows[1:]:
    by_id[r[col["ID"]]][r[col["Metric Name"]]] = r[col["Metric Value"]].replace(",", "")
    by_id[r[col["ID"]]]["kernel"] = r[col["Kernel Name"]][:30]
    by_id[r[col["ID"]]]["nvtx"] = " ".join(r[i] for i in ranges)[:60]
for kid, m in by_id.items():
    stalls = sorted(((float(v), k.split("stalled_")[1].split("_per")[0]) for k, v in m.items() if "stalled_" in k), reverse=True)[:4]
    print(f"{sys.argv[2]} {m['nvtx']} | {m['kernel']} | {float(m['gpu__time_duration.sum']) / 1000:.1f} us | "
          f"DRAM read {float(m['dram__bytes_read.sum']) / 1e6:.1f} MB write {float(m['dram__bytes_write.sum']) / 1e6:.1f} MB | "
          f"occupancy {m['sm__warps_active.avg.pct_of_peak_sustained_active']} / {m['sm__maximum_warps_per_active_cycle_pct']} | "
          f"regs {m['launch__registers_per_thread']} grid {m['launch__grid_size']} | warp inst {float(m['smsp__inst_executed.sum']) / 1e6:.2f} M | "
          + ", ".join(f"{n} {v:.2f}" for v, n in stalls))
PY
done
exit "$rc"
