"""Side-by-side table of kernel versions from `device/device_kernel_ab.sh`'s kernel_ab.tar.gz (or a folder
of its `<tree>.r<round>.json` files): per benchmark row, the median GPU time over the rounds and
its % of copy bandwidth, one column per tree.

    python benchmarks/kernel_ab_table.py kernel_ab.tar.gz [--md out.md]
"""
from __future__ import annotations

import argparse
import json
import statistics
import tarfile
from collections import defaultdict
from pathlib import Path

# section -> (label of a row, its time key, its % of copy key); dual rows give two lines.
METRICS = {
    "dual": [(lambda r: f"dual {r['format']} {r['layout']} {r['M']}x{r['K']}", "dual_us", "pct_copy"),
             (lambda r: f"columnwise {r['format']} {r['layout']} {r['M']}x{r['K']}", "columnwise_us",
              "columnwise_pct_copy")],
    "rht": [(lambda r: f"rht {r['outputs']} {r['layout']} {r['M']}x{r['K']}", "fused_us", "pct_copy")],
    "grouped": [(lambda r: f"{r['kind']} {r['format']} {r['shape']}", "grouped_us", "pct_copy")],
    "quantize": [(lambda r: f"quantize {r['format']} {r['layout']} {r['M']}x{r['K']}", "us", "pct_copy")],
    "fused": [(lambda r: f"{r['op']} {r['format']} {r['layout']} {r['M']}x{r['H']}", "us", "pct_copy")],
}


def load(src: Path) -> dict[str, list[dict]]:
    """tree name -> its run.json results, one per round."""
    runs: dict[str, list[dict]] = defaultdict(list)
    if src.is_dir():
        items = [(p.name, p.read_text()) for p in sorted(src.glob("*.json"))]
    else:
        with tarfile.open(src) as tar:
            items = [(m.name, tar.extractfile(m).read().decode()) for m in tar.getmembers() if m.isfile()]
    for name, text in items:
        runs[Path(name).name.split(".r")[0]].append(json.loads(text))
    return runs


def table(runs: dict[str, list[dict]]) -> str:
    trees = list(runs)
    cells: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    order: list[str] = []
    for tree, results in runs.items():
        for res in results:
            for section, metrics in METRICS.items():
                for row in res.get(section) or []:
                    for label_of, t_key, p_key in metrics:
                        label = label_of(row)
                        if label not in order:
                            order.append(label)
                        cells[label][tree].append((row[t_key], row[p_key]))
    lines = ["| row | " + " | ".join(f"{t} us (% copy)" for t in trees) + " |",
             "|---|" + "---:|" * len(trees)]
    for label in order:
        out = []
        for t in trees:
            vals = cells[label].get(t)
            out.append("-" if not vals else f"{statistics.median(v[0] for v in vals):.1f} "
                       f"({statistics.median(v[1] for v in vals):.1f})")
        lines.append(f"| {label} | " + " | ".join(out) + " |")
    devices = {res.get("device") for results in runs.values() for res in results}
    copies = [res.get("copy_GBps") for results in runs.values() for res in results]
    head = f"device: {', '.join(sorted(map(str, devices)))}; copy GB/s per run: {', '.join(f'{c:.0f}' for c in copies)}"
    return head + "\n\n" + "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path, help="kernel_ab.tar.gz or a folder of <tree>.r<round>.json")
    ap.add_argument("--md", type=Path, help="also write the table to this file")
    args = ap.parse_args()
    text = table(load(args.src))
    print(text)
    if args.md:
        args.md.write_text(text + "\n")


if __name__ == "__main__":
    main()
