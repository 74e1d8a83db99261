"""Side-by-side table of kernel versions from `device/device_kernel_ab.sh`'s kernel_ab.tar.gz (or a folder
of its `<tree>.r<round>.json` files, as `device/wheel_ab.sh` writes them): per benchmark row, the
median GPU time over the rounds and its % of copy bandwidth, one column per tree; then, per kind of
row (its op and format, or op and outputs), each tree's change in points of % of copy against the
base tree (`--base`, default the first column): min / max / mean over the rows both measured.

    python benchmarks/kernel_ab_table.py kernel_ab.tar.gz [--base TREE] [--md out.md]
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


def medians(runs: dict[str, list[dict]]) -> tuple[list[str], dict[str, dict[str, tuple[float, float]]]]:
    """Row labels in first-seen order, and per label and tree the medians over rounds of
    (GPU time us, % of copy)."""
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
    return order, {label: {t: (statistics.median(v[0] for v in vals), statistics.median(v[1] for v in vals))
                           for t, vals in cells[label].items()} for label in order}


def table(runs: dict[str, list[dict]]) -> str:
    trees = list(runs)
    order, cells = medians(runs)
    lines = ["| row | " + " | ".join(f"{t} us (% copy)" for t in trees) + " |",
             "|---|" + "---:|" * len(trees)]
    for label in order:
        out = ["-" if t not in cells[label] else f"{cells[label][t][0]:.1f} ({cells[label][t][1]:.1f})" for t in trees]
        lines.append(f"| {label} | " + " | ".join(out) + " |")
    devices = {res.get("device") for results in runs.values() for res in results}
    copies = [res.get("copy_GBps") for results in runs.values() for res in results]
    head = f"device: {', '.join(sorted(map(str, devices)))}; copy GB/s per run: {', '.join(f'{c:.0f}' for c in copies)}"
    return head + "\n\n" + "\n".join(lines)


def base_tree(runs: dict[str, list[dict]], base: str | None) -> str:
    """The tree changes are taken against: `base`, or the first tree; ValueError for an unknown name."""
    if base is None:
        return next(iter(runs))
    if base not in runs:
        raise ValueError(f"--base: no tree named {base!r} (trees: {', '.join(runs)})")
    return base


def summary(runs: dict[str, list[dict]], base: str | None = None) -> str:
    """Per kind of row (the label's first two words: op and format, or op and outputs), each other
    tree's change against `base` (`base_tree`) in points of % of copy over the rows both measured:
    min / max / mean and the number of rows."""
    base = base_tree(runs, base)
    others = [t for t in runs if t != base]
    order, cells = medians(runs)
    kinds: dict[str, list[str]] = defaultdict(list)
    for label in order:
        kinds[" ".join(label.split()[:2])].append(label)
    lines = [f"change in points of % of copy against {base}: min / max / mean (rows)", "",
             "| rows | " + " | ".join(others) + " |", "|---|" + "---|" * len(others)]
    for kind, labels in kinds.items():
        out = []
        for t in others:
            d = [cells[x][t][1] - cells[x][base][1] for x in labels if t in cells[x] and base in cells[x]]
            out.append("-" if not d else f"{min(d):+.1f} / {max(d):+.1f} / {statistics.mean(d):+.1f} ({len(d)})")
        lines.append(f"| {kind} | " + " | ".join(out) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path, help="kernel_ab.tar.gz or a folder of <tree>.r<round>.json")
    ap.add_argument("--base", help="the tree the changes are taken against (default: the first column)")
    ap.add_argument("--md", type=Path, help="also write the table to this file")
    args = ap.parse_args()
    if not args.src.exists():
        ap.error(f"src: {args.src} does not exist (expected kernel_ab.tar.gz or a folder of results)")
    runs = load(args.src)
    if not runs:
        ap.error(f"src: no <tree>.r<round>.json results in {args.src}")
    try:
        base = base_tree(runs, args.base)
    except ValueError as exc:
        ap.error(str(exc))
    text = table(runs) + "\n\n" + (summary(runs, base) if len(runs) > 1 else "")
    print(text.rstrip())
    if args.md:
        args.md.write_text(text.rstrip() + "\n")


if __name__ == "__main__":
    main()
