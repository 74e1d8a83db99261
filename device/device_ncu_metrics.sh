#!/usr/bin/env bash
# One device-tool call: raw Nsight Compute counters (L1/L2/DRAM sectors and requests, instructions)
# for the kernel cases in KF_NCU_CASES (benchmarks/profile_kernels.py syntax), with the tree in
# KF_TREE (default: this checkout) and the cache in KF_CACHE (default: cache/). Writes $OUT/ncu_metrics.txt
# (ncu's csv) and prints one line per case and metric.
set -uo pipefail
cd "$(dirname "$0")/.."
source device/device_env.sh
tree="$(realpath "${KF_TREE:-.}")"
metrics="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,\
lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum,\
lts__t_requests_srcunit_tex_op_read.sum,lts__t_requests_srcunit_tex_op_write.sum,\
lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,\
dram__throughput.avg.pct_of_peak_sustained_elapsed,\
l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,\
l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum,l1tex__m_xbar2l1tex_read_sectors.sum,\
l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,\
smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread"
# shellcheck disable=SC2086
PYTHONPATH="/tmp/kf-site:$tree" KERNELFORGE_CACHE_DIR="$(realpath "${KF_CACHE:-cache}")" \
  ncu --clock-control none --nvtx --nvtx-include "kf/" --metrics "$metrics" --csv \
  python3 benchmarks/profile_kernels.py $KF_NCU_CASES > "$OUT/ncu_metrics.txt" 2>&1
rc=$?
python3 - "$OUT/ncu_metrics.txt" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows:
    print(open(sys.argv[1]).read()[-3000:]); sys.exit()
h = rows[0]; iname = h.index("Kernel Name"); iid = h.index("ID"); im = h.index("Metric Name"); iv = h.index("Metric Value")
for r in rows[1:]:
    print(r[iid], r[iname][:40], r[im], r[iv])
PY
exit $rc
