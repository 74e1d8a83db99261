#!/usr/bin/env bash
# One device-tool call: re-measure part of this card's tuning table on a pip-installed release
# ($KF_WHEELS, default .carry/dist) after one op family's kernel changed. `kernelforge tune --only
# "$KF_TUNE_ONLY"` (default 'quantize|*') runs on a writable copy of the kernel wheel's cache; the
# dispatch groups it measured replace theirs in the card's committed table
# (kernelforge/data/tuning/<card>.sm_90a.json), whose other choices are kept; then `validate` runs
# on that copy with the merged table. $OUT/<card>.sm_90a.json is the table to commit.
#   here: the release's wheels in .carry/ (docs/release.md); afterwards commit the table and repackage
set -uo pipefail
source "$(dirname "$0")/wheel_node.sh"
card="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
slug="$(echo "$card" | tr 'A-Z ' 'a-z_')"
echo "card: $card"
rm -rf /tmp/kf-tune && cp -r "$SITE"/kernelforge_kernels_sm90a/cache /tmp/kf-tune && chmod -R u+w /tmp/kf-tune
python3 -m kernelforge tune --cache /tmp/kf-tune --only "${KF_TUNE_ONLY:-quantize|*}" --export "$OUT/part.json" \
  > "$OUT/tune.log" 2>&1 || { tail -5 "$OUT/tune.log"; exit 1; }
tail -1 "$OUT/tune.log"
python3 - "$REPO/kernelforge/data/tuning/$slug.sm_90a.json" "$OUT/part.json" "$OUT/$slug.sm_90a.json" <<'PY'
import json, sys
base, part = (json.load(open(p)) for p in sys.argv[1:3])
assert base["device"] == part["device"] and base["arch"] == part["arch"], (base["device"], part["device"])
for key in ("choices", "timings_us"):
    base[key].update(part[key])
base["sources"].update(part["sources"])
base["created"] = part["created"]
json.dump(base, open(sys.argv[3], "w"), indent=1, sort_keys=True)
print(f"merged {len(part['choices'])} dispatch groups into {len(base['choices'])}: {sys.argv[3]}")
PY
python3 -m kernelforge tune --cache /tmp/kf-tune --import "$OUT/$slug.sm_90a.json" | tail -1
python3 -m kernelforge validate --cache /tmp/kf-tune 2>&1 | tee "$OUT/validate_tuned.log" | tail -1
exit "${PIPESTATUS[0]}"
