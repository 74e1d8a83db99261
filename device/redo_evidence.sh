#!/usr/bin/env bash
# One device-tool call (or a step of one): the evidence of a saved benchmark run's missed targets
# again (benchmarks/run.py --plots-from RUN.json --redo-evidence) on the release's installed wheels
# (device/wheel_node.sh), on the card that run was measured on. Usage: device/redo_evidence.sh RUN.json
# KF_EVIDENCE_OF: which evidence (default "kernels host": Nsight Compute on the missed kernel targets,
# host_evidence.py's probes of the missed host targets, the first call also from a directory copy of
# the kernel wheel's cache). Writes $OUT/<RUN>.json (with the new evidence) and $OUT/results-<RUN>/
# (the report). Exit 9 on another card.
set -uo pipefail
run_json="$(realpath "$1")"
name="$(basename "$run_json" .json)"
source "$(dirname "$0")/wheel_node.sh"
want="$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['device'])" "$run_json")"
card="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
[ "$card" = "$want" ] || { echo "$name was measured on $want, this is $card: not profiled"; exit 9; }
cp "$run_json" "$OUT/$name.json"
rm -rf /tmp/kf-cachedir && cp -r "$SITE"/kernelforge_kernels_sm90a/cache /tmp/kf-cachedir
python3 "$REPO/benchmarks/run.py" --plots-from "$OUT/$name.json" --redo-evidence --no-append \
  --evidence-of ${KF_EVIDENCE_OF:-kernels host} --startup-cache-dir /tmp/kf-cachedir \
  --out-dir "$OUT/results-$name" 2>&1 | grep -A40 "Why the missed"
