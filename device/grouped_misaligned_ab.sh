#!/usr/bin/env bash
# One device-tool call: quantize_grouped on misaligned input (the `any` K-class: x's pointer and row
# stride not 16-byte aligned) from releases' wheels side by side (KF_RELEASES, carry folders; each
# pip-installed into its own bare target as device/wheel_node.sh does): CUDA-graph-replayed time
# per format and dtype, releases alternated, then the grouped family's GPU test file on every
# release but the first. Logs in $OUT: misaligned_ab.log, tests_<release>.log.
set -uo pipefail
KF_INSTALL_LATER=1 source "$(dirname "$0")/wheel_node.sh"
nvidia-smi --query-gpu=name --format=csv,noheader
read -r -a releases <<< "${KF_RELEASES:-.carry/dist .carry/dist-b}"
for r in "${releases[@]}"; do install_wheels "$REPO/$r" "/tmp/site-$(basename "$r")" || exit 3; done
CHILD='
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from _timing import graph_us
import kernelforge
t, k, g = 16384, 7168, 64
gen = torch.Generator().manual_seed(0)
sizes = torch.multinomial(torch.ones(g), t, replacement=True, generator=gen).bincount(minlength=g)
offs = sizes.cumsum(0).to(torch.int32).cuda()
out = {}
for dtype in (torch.bfloat16, torch.float32):
    base = torch.randn(t, k + 1, device="cuda", dtype=dtype)
    x = base[:, 1:]  # pointer 2 or 4 bytes past alignment, row stride (k + 1) elements
    for fmt in ("mxfp8", "mxfp4", "nvfp4"):
        res = kernelforge.quantize_grouped(x, offs, fmt)
        out[f"{fmt} {str(dtype)[6:]}"] = graph_us(lambda: kernelforge.quantize_grouped(x, offs, fmt, out=res))
    del base, x
print(json.dumps(out))
'
for round in 1 2 3; do
  for r in "${releases[@]}"; do
    PYTHONPATH="/tmp/site-$(basename "$r")" python3 -c "$CHILD" "$REPO/benchmarks" | sed "s|^|$(basename "$r") |"
  done
done | tee "$OUT/misaligned_ab.log"
python3 "$REPO/benchmarks/release_medians.py" "$OUT/misaligned_ab.log" "case (G = 64, 16384x7168, misaligned)"
for r in "${releases[@]:1}"; do
  site="/tmp/site-$(basename "$r")"
  PYTHONPATH="$site" python3 -m pytest -q -p no:cacheprovider "$site/kernelforge/families/quantize_grouped/test_gpu.py" \
    > "$OUT/tests_$(basename "$r").log" 2>&1
  echo "$(basename "$r"): $(tail -1 "$OUT/tests_$(basename "$r").log")"
done
