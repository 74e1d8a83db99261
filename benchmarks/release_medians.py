"""The side-by-side table of an A/B whose child processes each print one JSON object of case ->
microseconds, the line prefixed with its release's name (`device/grouped_misaligned_ab.sh`,
`device/grouped_tall_ab.sh`): a row per case, a column per release, the median over the rounds.

    python benchmarks/release_medians.py LOG "FIRST COLUMN HEADER"
"""
from __future__ import annotations

import json
import statistics
import sys


def main() -> None:
    log, header = sys.argv[1], sys.argv[2]
    rows: dict[str, dict[str, list[float]]] = {}
    for line in open(log):
        name, data = line.split(" ", 1)
        for case, us in json.loads(data).items():
            rows.setdefault(case, {}).setdefault(name, []).append(us)
    names = list(next(iter(rows.values())))
    print(f"| {header} | " + " | ".join(f"{n} us" for n in names) + " |")
    for case, per in rows.items():
        print(f"| {case} | " + " | ".join(f"{statistics.median(per[n]):.1f}" for n in names) + " |")


if __name__ == "__main__":
    main()
