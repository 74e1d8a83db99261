#!/usr/bin/env bash
# One device-tool call: quantize_grouped `offsets` on tall aligned input (KF_T rows, default 65536,
# of 7168 bf16; at most 4096 CTAs of 4 row warps each, so every warp has several rows) from releases'
# wheels side by side (KF_RELEASES, carry folders; each pip-installed into its own bare target as
# device/wheel_node.sh does): CUDA-graph-replayed time per format and group count, releases
# alternated for 3 rounds, then `kernelforge validate` on every release but the first.
# Logs in $OUT: tall_ab.log, validate_<release>.log.
set -uo pipefail
KF_INSTALL_LATER=1 source "$(dirname "$0")/wheel_node.sh"
nvidia-smi --query-gpu=name --format=csv,noheader
read -r -a releases <<< "${KF_RELEASES:-.carry/dist .carry/dist-b}"
for r in "${releases[@]}"; do install_wheels "$REPO/$r" "/tmp/site-$(basename "$r")" || exit 3; done
rc=0
for r in "${releases[@]:1}"; do
  PYTHONPATH="/tmp/site-$(basename "$r")" python3 -m kernelforge validate > "$OUT/validate_$(basename "$r").log" 2>&1 || rc=1
  echo "$(basename "$r"): $(tail -1 "$OUT/validate_$(basename "$r").log")"
done
CHILD='
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from _timing import graph_us
import kernelforge
t, k = int(sys.argv[2]), 7168
x = torch.randn(t, k, device="cuda", dtype=torch.bfloat16)
out = {}
for g in (64, 1024):
    gen = torch.Generator().manual_seed(g)
    sizes = torch.multinomial(torch.ones(g), t, replacement=True, generator=gen).bincount(minlength=g)
    offs = sizes.cumsum(0).to(torch.int32).cuda()
    for fmt in ("mxfp8", "mxfp4", "nvfp4"):
        res = kernelforge.quantize_grouped(x, offs, fmt)
        out[f"{fmt} G={g}"] = graph_us(lambda: kernelforge.quantize_grouped(x, offs, fmt, out=res))
        del res
print(json.dumps(out))
'
for round in 1 2 3; do
  for r in "${releases[@]}"; do
    PYTHONPATH="/tmp/site-$(basename "$r")" python3 -c "$CHILD" "$REPO/benchmarks" "${KF_T:-65536}" | sed "s|^|$(basename "$r") |"
  done
done | tee "$OUT/tall_ab.log"
python3 "$REPO/benchmarks/release_medians.py" "$OUT/tall_ab.log" "case (${KF_T:-65536}x7168 bf16, aligned)"
exit "$rc"
