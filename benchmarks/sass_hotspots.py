"""Where a kernel's warps stall, by stretch of SASS: Nsight Compute source pages side by side.

    python benchmarks/sass_hotspots.py sass_1.csv [sass_2.csv ...] [--window 50]

Each CSV is `ncu -i REPORT --page source --csv --print-source sass` of one kernel launch
(`device/ncu_source.sh` writes them). For every stretch of `--window` consecutive instructions it
prints each file's warp-state samples (where warps waited) and executed warp instructions, with
the stretch's first instruction, so two launches of one kernel (say G = 1024 and G = 64 groups)
show which part of the code their difference is in: the same build gives the same addresses.
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path


def load(path: Path) -> list[tuple[str, float, float]]:
    """(SASS text, warp-state samples, warp instructions executed) per instruction, in address order."""
    rows = [r for r in csv.reader(path.open()) if len(r) > 3]
    head = rows[0]
    src = head.index("Source")
    samples = head.index("Warp Stall Sampling (All Samples)")
    executed = head.index("Instructions Executed")
    return [(r[src].strip(), float(r[samples] or 0), float(r[executed] or 0)) for r in rows[1:]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="+", type=Path)
    ap.add_argument("--window", type=int, default=50, help="instructions per stretch (default 50)")
    args = ap.parse_args()
    pages = [load(p) for p in args.csv]
    names = " | ".join(p.name for p in args.csv)
    print("totals: " + " | ".join(f"{p.name}: {sum(s for _, s, _ in page):.0f} samples, "
                                  f"{sum(e for _, _, e in page) / 1e6:.2f} M warp instructions"
                                  for p, page in zip(args.csv, pages)))
    print(f"first instruction | samples ({names}) | M warp instructions ({names})")
    for i in range(0, max(len(p) for p in pages), args.window):
        parts = [page[i:i + args.window] for page in pages]
        samples = " / ".join(f"{sum(s for _, s, _ in part):.0f}" for part in parts)
        executed = " / ".join(f"{sum(e for _, _, e in part) / 1e6:.2f}" for part in parts)
        first = next((part[0][0] for part in parts if part), "")
        print(f"{i:5d} {first[:48]:48s} | {samples} | {executed}")


if __name__ == "__main__":
    main()
