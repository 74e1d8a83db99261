#!/usr/bin/env bash
# One device-tool call: the first call of a fresh process (torch imported, CUDA ready) from two
# pip-installed trees, alternated on the same GPU: .carry/ab/<name>/ holds each tree's kernelforge
# wheel and kernel wheel (signed by .carry/keys/release.pub's key); .carry/deps the dependency wheels.
# Prints, per tree, min/median/max over KF_AB_RUNS processes of: import kernelforge + resolving the op
# (import_ms), and the first quantize(x, "mxfp8") call to its synchronize (first_call_ms).
set -uo pipefail
KF_INSTALL_LATER=1 source "$(dirname "$0")/wheel_node.sh"
trees=()
for dir in "$REPO"/.carry/ab/*/; do
  name="$(basename "$dir")"; trees+=("$name")
  install_wheels "$dir" "/tmp/site-$name" || exit 3
done
CHILD='
import sys, time, json, torch
x = torch.randn(1024, 4096, device="cuda", dtype=torch.bfloat16); torch.cuda.synchronize()
t0 = time.perf_counter()
import kernelforge
q = kernelforge.quantize
t1 = time.perf_counter()
q(x, "mxfp8"); torch.cuda.synchronize()
t2 = time.perf_counter()
print(json.dumps({"import_ms": (t1 - t0) * 1e3, "first_call_ms": (t2 - t1) * 1e3, "total_ms": (t2 - t0) * 1e3}))
'
for ((i = 0; i < ${KF_AB_RUNS:-12}; i++)); do
  for name in "${trees[@]}"; do
    PYTHONPATH="/tmp/site-$name" python3 -c "$CHILD" | sed "s/^/$name /" >> /tmp/ab.txt
  done
done
python3 - <<'PY'
import json, statistics
rows = {}
for line in open("/tmp/ab.txt"):
    name, data = line.split(" ", 1)
    for k, v in json.loads(data).items():
        rows.setdefault(name, {}).setdefault(k, []).append(v)
for name, d in rows.items():
    print(name, "  ".join(f"{k} min {min(v):.1f} median {statistics.median(v):.1f} max {max(v):.1f}" for k, v in d.items()), f"(n={len(d['total_ms'])})")
PY
