"""`kernelforge cache ...`: list, summarise, verify, repair, clean and merge the artifact cache; move
entries to and from remote stores and offline bundles."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.table import Table

from kernelforge.cache import CacheStore, clean, stats
from kernelforge.cache.maintenance.verification import verify_layer
from kernelforge.cache.read.entry import Entry
from kernelforge.cache.read.layers import EXPLICIT_SOURCES, Layer, resolve_layers
from kernelforge.cache.read.origin import origin_text
from kernelforge.cli._common import out_console
from kernelforge.config import resolve_cache_root
from kernelforge.errors import CacheError

app = typer.Typer(help="Inspect and manage the artifact cache (dir, ls, stats, verify, repair, clean, gc, limit, "
                       "merge, push, pull, export, import). Every command takes --format json; those that change "
                       "a cache (clean, gc, merge, push, pull, import) take --dry-run.",
                  no_args_is_help=True)

CacheOpt = typer.Option(None, "--cache", help="Cache root (default: $KERNELFORGE_CACHE_DIR, the checkout's cache/, "
                                             "or ~/.cache/kernelforge).")


class Fmt(str, Enum):
    table = "table"
    json = "json"


FormatOpt = typer.Option(Fmt.table, "--format", help="Output format.")


def _out() -> Console:
    # Output that is not a terminal (grep, CI logs, files) is never wrapped or cut: every row whole.
    return out_console()


def _err() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)  # an error is one line, however long


def _open(cache: Optional[Path], *, must_exist: bool = True) -> tuple[CacheStore, str]:
    """The store at the resolved root; exit 2 with one line if it is not an existing directory."""
    root, source = resolve_cache_root(cache)
    if must_exist and not root.is_dir():
        what = "is not a directory" if root.exists() else "does not exist"
        _err().print(f"error: cache root {root} (from {source}) {what}", markup=False, soft_wrap=True)
        raise typer.Exit(2)
    probe = root
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():  # a file where the root (or a directory above it) would go: never a cache
        _err().print(f"error: cache root {root} (from {source}): {probe} is not a directory", markup=False)
        raise typer.Exit(2)
    return CacheStore(root), source


def _open_layers(cache: Optional[Path]) -> list[tuple[CacheStore, Layer]]:
    """The layers ls/stats/verify report on: an explicit root alone (exit 2 if it is missing),
    else the user/checkout cache (skipped if it does not exist) and every installed kernel wheel."""
    layers = resolve_layers(cache)
    if layers[0].source in EXPLICIT_SOURCES or len(layers) == 1:
        store, _ = _open(cache)
        return [(store, layers[0])]
    found = [(CacheStore(layer.root), layer) for layer in layers if layer.root.is_dir() or layer.source == "wheel"]
    if not found:
        _open(cache)  # exits 2 naming the missing root
    return found


def _say_layers(console: Console, layers: list[tuple[CacheStore, Layer]]) -> None:
    for store, layer in layers:
        status = "read-write" if layer.writable else "read-only"
        refused = f"; REFUSED by the runtime: {layer.refused}" if layer.refused else ""
        signed = ("" if layer.source != "wheel" or layer.refused else
                  f"; signed by key {layer.signer}" if layer.signer else
                  "; UNSIGNED, allowed by KERNELFORGE_ALLOW_UNSIGNED")
        console.print(f"layer {layer.label}: {store.root} ({status}{signed}{refused})", markup=False, soft_wrap=True)


def _say_root(console: Console, store: CacheStore, source: str) -> None:
    console.print(f"cache: {store.root} (from {source})", markup=False, soft_wrap=True)


def human_bytes(n: int) -> str:
    """1536 -> '1.5 KiB'."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


@app.command("dir")
def dir_cmd(cache: Optional[Path] = CacheOpt, fmt: Fmt = FormatOpt) -> None:
    """Print the cache root the commands use (as `pip cache dir`), resolved from --cache,
    $KERNELFORGE_CACHE_DIR, the checkout's cache/ or ~/.cache/kernelforge; it need not exist yet."""
    root, source = resolve_cache_root(cache)
    if fmt is Fmt.json:
        from .json_schemas import emit

        emit("cache_dir", {"root": str(root), "root_source": source})
        return
    print(root)


@app.command("ls")
def ls_cmd(cache: Optional[Path] = CacheOpt, fmt: Fmt = FormatOpt) -> None:
    """List the cached entries of every layer (or of --cache alone), with the layer that serves each."""
    layers = _open_layers(cache)
    rows: list[tuple[Entry, Layer]] = []
    seen: set[str] = set()
    shadowed = 0
    for store, layer in layers:
        for e in store.iter_entries():
            if e.key in seen:
                shadowed += 1  # an earlier layer serves the same key
                continue
            seen.add(e.key)
            rows.append((e, layer))
    first_store, first = layers[0]
    layered = first.source not in EXPLICIT_SOURCES
    if fmt is Fmt.json:
        from .json_schemas import emit

        emit("cache_ls", {"root": str(first_store.root), "root_source": first.source,
                          "layers": [layer.to_dict() for _, layer in layers], "shadowed": shadowed,
                          "entries": [{**e.to_json(), "layer": layer.label} for e, layer in rows]})
        return
    console = _out()
    if layered:
        _say_layers(console, layers)
    else:
        _say_root(console, first_store, first.source)
    table = Table(show_edge=False)
    cols = ("name", "arch", "kind", "size", "sha256", "toolchain", "built", "origin") + (("layer",) if layered else ())
    for col in cols:
        table.add_column(col, justify="right" if col == "size" else "left", no_wrap=col != "name",
                         min_width=12 if col == "name" else None)
    for e, layer in rows:
        built = e.created.replace("T", " ")[:16]
        extra = (layer.label + (" (refused)" if layer.refused else ""),) if layered else ()
        table.add_row(e.name, e.arch, e.kind, human_bytes(e.size), e.sha256[:12], e.toolchain_id[:12], built,
                      origin_text(e.extra, short=True), *extra)
    console.print(table)
    note = f" ({shadowed} more shadowed by an earlier layer)" if shadowed else ""
    console.print(f"{len(rows)} entries{note}", markup=False)


@app.command("stats")
def stats_cmd(cache: Optional[Path] = CacheOpt, fmt: Fmt = FormatOpt) -> None:
    """Summarise each layer: totals, then entries and bytes per kind/op/arch and per toolchain."""
    layers = _open_layers(cache)
    keep_tc, keep_src = _serving_criteria()
    reports = [(stats(store, keep_toolchain_id=keep_tc, keep_source_hashes=keep_src), layer) for store, layer in layers]
    if fmt is Fmt.json:
        report, layer = reports[0]
        from .json_schemas import emit, stats_body

        emit("cache_stats", {**stats_body(report), "root_source": layer.source,
                             "layers": [{**lay.to_dict(), **stats_body(r)} for r, lay in reports]})
        return
    console = _out()
    for report, layer in reports:
        _print_stats(console, report, layer, layer.source not in EXPLICIT_SOURCES)


def _print_stats(console: Console, report, layer: Layer, layered: bool) -> None:
    summary = Table(show_header=False, show_edge=False, box=None)
    summary.add_column(style="bold")
    summary.add_column()
    if layered:
        summary.add_row("Layer", layer.label + (f" (REFUSED by the runtime: {layer.refused})" if layer.refused else ""))
    summary.add_row("Cache root", f"{report.root} (from {layer.source})")
    summary.add_row("Schema", f"v{report.schema}")
    summary.add_row("Entries", str(report.entries))
    summary.add_row("Entries size", human_bytes(report.bytes) + " (the entries' recorded files)")
    summary.add_row("Total size", f"{human_bytes(report.tree_bytes)} (every file under the root: index, dispatch "
                    f"views, usage records, locks too); on disk {human_bytes(report.disk_bytes)} (du)")
    if layer.writable:
        from kernelforge.cache.maintenance.gc import effective_limit

        try:
            limit, source = effective_limit(CacheStore(report.root))
        except ValueError as exc:
            limit, source = None, str(exc)
        summary.add_row("Size limit", f"{human_bytes(limit)} (from {source})" if limit else f"none ({source})"
                        if source != "none" else "none (`kernelforge cache limit SIZE` sets one)")
    summary.add_row("Orphans", str(report.orphans))
    summary.add_row("Stale", "unknown (no build toolchain here)" if report.stale is None else
                    f"{report.stale} (kernels this kernelforge never serves; `cache clean --stale` removes them)")
    console.print(summary)
    if report.usage:
        usage = Table(show_edge=False, title="usage (advisory: recorded by the runtime, per op)", title_justify="left")
        for col in ("op", "hits", "misses", "loads"):
            usage.add_column(col, justify="left" if col == "op" else "right")
        for op, c in sorted(report.usage.items()):
            usage.add_row(op, str(c.get("hit", 0)), str(c.get("miss", 0)), str(c.get("load", 0)))
        console.print(usage)
    if report.by_kind_op_arch:
        groups = Table(show_edge=False)
        for col in ("kind", "op", "arch", "entries", "size"):
            groups.add_column(col, justify="right" if col in ("entries", "size") else "left")
        for (kind, op, arch), g in sorted(report.by_kind_op_arch.items()):
            groups.add_row(kind, op, arch, str(g.entries), human_bytes(g.bytes))
        console.print(groups)
        tools = Table(show_edge=False)
        for col in ("toolchain", "entries", "size"):
            tools.add_column(col, justify="left" if col == "toolchain" else "right")
        for tid, g in sorted(report.by_toolchain.items()):
            tools.add_row(tid, str(g.entries), human_bytes(g.bytes))
        console.print(tools)


@app.command("verify")
def verify_cmd(cache: Optional[Path] = CacheOpt, fmt: Fmt = FormatOpt) -> None:
    """Prove each layer is what its index says (files, references, views, modes; a kernel wheel
    also against its SHA256SUMS); exit 1 if any layer is not, or if a kernel wheel is refused (built
    for another kernelforge or TVM-FFI ABI: the runtime serves none of its kernels)."""
    layers = _open_layers(cache)
    results = []
    for store, layer in layers:
        results.append((store, layer, verify_layer(layer)))
    ok = all(report.ok and not layer.refused for _, layer, report in results)  # a refused wheel serves nothing
    if fmt is Fmt.json:
        store, layer, report = results[0]
        from .json_schemas import emit

        emit("cache_verify", {**report.to_dict(), "root_source": layer.source,
                              "layers": [{**lay.to_dict(), **r.to_dict()} for _, lay, r in results]})
        raise typer.Exit(0 if ok else 1)
    console = _out()
    for store, layer, report in results:
        if layer.source in EXPLICIT_SOURCES:
            _say_root(console, store, layer.source)
        else:
            _say_layers(console, [(store, layer)])
        for problem in report.problems:
            console.print(f"PROBLEM: {problem}", markup=False, soft_wrap=True)
        for orphan in report.orphans:
            console.print(f"debris (not an entry; `kernelforge cache clean` removes it): {orphan}", markup=False,
                          soft_wrap=True)
        if not report.ok:
            fix = (f"reinstall {layer.label}" if layer.source == "wheel" else
                   f"`kernelforge cache repair --cache {store.root}`, then `kernelforge build` to rebuild "
                   "what it quarantined or dropped")
            console.print(f"FAILED: {len(report.problems)} problem(s) in {report.entries} entries; fix: {fix}",
                          markup=False, soft_wrap=True)
        else:
            console.print(f"OK: {report.entries} entries verified ({report.files} files)", markup=False)
        if layer.refused:
            console.print(f"FAILED: {layer.label} is refused by the runtime, none of its kernels is served: "
                          f"{layer.refused}", markup=False, soft_wrap=True)
        for signer, count in sorted(report.signed.items()):
            console.print(f"signatures: {count} arrived entries signed by key {signer} (checked)", markup=False)
        if report.unsigned:
            console.print(f"note: {len(report.unsigned)} arrived entries are unsigned (accepted with "
                          f"--allow-unsigned), e.g. {report.unsigned[0]}", markup=False, soft_wrap=True)
    if not ok:
        raise typer.Exit(1)


@app.command("repair")
def repair_cmd(cache: Optional[Path] = CacheOpt, fmt: Fmt = FormatOpt) -> None:
    """Rebuild the index from the entries' meta.json (re-hashed), quarantine damaged entries,
    remove group/other write permission, rewrite the dispatch views. Never deletes an entry."""
    from kernelforge.cache.maintenance.repair import repair

    store, source = _open(cache)
    problem = store.writable_problem()
    if problem:
        _err().print(f"error: {problem}; repair needs to write it", markup=False, soft_wrap=True)
        raise typer.Exit(2)
    report = repair(store)
    if fmt is Fmt.json:
        from .json_schemas import emit

        emit("cache_repair", {**report.to_dict(), "root_source": source})
        raise typer.Exit(1 if report.unfixable else 0)
    console = _out()
    _say_root(console, store, source)
    if report.index_problem:
        console.print(f"index: {report.index_problem}: rebuilt from the entries' meta.json", markup=False,
                      soft_wrap=True)
    for name in report.reindexed:
        console.print(f"re-indexed: {name}", markup=False)
    for name, reason, where in report.quarantined:
        console.print(f"quarantined: {name}: {reason} -> {where}", markup=False, soft_wrap=True)
    for name in report.dropped:
        console.print(f"dropped from the index (no files): {name}", markup=False)
    if report.views_rewritten:
        console.print("dispatch views: rewritten from the index", markup=False)
    for path in report.permissions_fixed:
        console.print(f"removed group/other write permission: {path}", markup=False, soft_wrap=True)
    for line in report.unfixable:
        console.print(f"NOT FIXED: {line}", markup=False, soft_wrap=True)
    rebuild = " ; run `kernelforge build` to rebuild what was quarantined or dropped" \
        if report.quarantined or report.dropped else ""
    console.print(f"repaired: {report.kept + len(report.reindexed)} "
                  f"entries indexed, {len(report.quarantined)} quarantined, {len(report.dropped)} dropped"
                  + rebuild if report.changed else f"nothing to repair: {report.kept} entries intact",
                  markup=False, soft_wrap=True)
    if report.unfixable:
        raise typer.Exit(1)


def _serving_criteria() -> tuple[str | None, set[str] | None]:
    """(toolchain id, kernel source hashes) this kernelforge serves, for the stale count; the
    toolchain part is None where the build toolchain is not installed."""
    try:
        from kernelforge.sources import OP_SOURCES, source_hash

        sources: set[str] | None = {"", *(source_hash(op) for op in OP_SOURCES)}
    except Exception:
        sources = None
    try:
        from kernelforge.build.toolchain import current_toolchain_id

        return current_toolchain_id(), sources
    except Exception:
        return None, sources


def _current_toolchain_id() -> str | None:
    try:
        from kernelforge.build.toolchain import current_toolchain_id

        return current_toolchain_id()
    except ImportError as exc:
        _err().print(f"error: --stale needs the current toolchain id, which is unavailable ({exc}); "
                     "install the build extra: pip install 'kernelforge[build]'", markup=False)
        return None


@app.command("clean")
def clean_cmd(
    cache: Optional[Path] = CacheOpt,
    all_: bool = typer.Option(False, "--all", help="Remove every entry."),
    stale: bool = typer.Option(False, "--stale", help="Remove entries this kernelforge would never serve: "
                               "built by another toolchain or from other kernel sources."),
    dry_run: bool = typer.Option(False, "--dry-run", "-n", help="Remove nothing: list what would be removed."),
    fmt: Fmt = FormatOpt,
) -> None:
    """Remove orphans (always), and every entry (--all) or stale entries (--stale); --dry-run lists them."""
    store, source = _open(cache)
    console = _out() if fmt is Fmt.table else _err()
    _say_root(console, store, source)
    keep_toolchain_id = keep_sources = None
    if stale and not all_:
        keep_toolchain_id = _current_toolchain_id()
        if keep_toolchain_id is None:
            raise typer.Exit(2)
        from kernelforge.sources import OP_SOURCES, source_hash

        keep_sources = {"", *(source_hash(op) for op in OP_SOURCES)}  # "": the shared runtime library
        console.print(f"current toolchain: {keep_toolchain_id}", markup=False)
    problem = store.writable_problem()
    if problem and not dry_run:
        _err().print(f"error: {problem}", markup=False, soft_wrap=True)
        raise typer.Exit(2)
    try:
        report = clean(store, all=all_, keep_toolchain_id=keep_toolchain_id, keep_source_hashes=keep_sources,
                       dry_run=dry_run)
    except CacheError as exc:
        _err().print(f"error: {exc}", markup=False, soft_wrap=True)
        raise typer.Exit(2) from None
    if fmt is Fmt.json:
        from .json_schemas import emit

        emit("cache_clean", {**report.to_dict(), "root_source": source, "dry_run": dry_run})
        return
    for note in report.notes:
        console.print(f"note: {note}", markup=False, soft_wrap=True)
    if dry_run:
        names = {e.key: e.name for e in store.index().values()}
        for key in report.removed:
            console.print(f"would remove {names.get(key, '?')} [{key[:12]}]", markup=False, soft_wrap=True)
        for path in report.orphans_removed:
            console.print(f"would remove orphan dir {path}", markup=False, soft_wrap=True)
    console.print(f"{'dry run: would remove' if dry_run else 'removed'} {len(report.removed)} entries "
                  f"({human_bytes(report.removed_bytes)}) and {len(report.orphans_removed)} orphan dirs"
                  + ("; nothing was removed" if dry_run else ""), markup=False)


@app.command("gc")
def gc_cmd(
    cache: Optional[Path] = CacheOpt,
    max_size: Optional[str] = typer.Option(None, "--max-size", "-M", help="Evict least recently used kernels until "
                                           "the cache root holds at most SIZE (500M, 2G, 1.5GiB; default: "
                                           "$KERNELFORGE_CACHE_MAX_SIZE, else the configured `cache limit`)."),
    older_than: Optional[str] = typer.Option(None, "--older-than", help="Evict kernels not used for AGE, "
                                             "with its unit: 30d, 12h, 45m, 90s, 2w (a bare number is "
                                             "refused)."),
    dry_run: bool = typer.Option(False, "--dry-run", "-n", help="Only list what would be evicted."),
    fmt: Fmt = FormatOpt,
) -> None:
    """Evict entries by size (LRU order from the runtime's recorded last use, else build time) and/or
    age. A runtime library goes only once no kept kernel links it; tuning tables are kept."""
    from kernelforge.cache.maintenance.gc import effective_limit, gc, parse_age

    store, source = _open(cache)
    try:
        age = parse_age(older_than) if older_than is not None else None
    except ValueError as exc:
        _err().print(f"error: --older-than: {exc}", markup=False)
        raise typer.Exit(2) from None
    try:
        limit, limit_source = effective_limit(store, max_size)
    except ValueError as exc:
        _err().print(f"error: {exc}", markup=False, soft_wrap=True)
        raise typer.Exit(2) from None
    if limit is None and age is None:
        _err().print("error: nothing to do: give --max-size SIZE or --older-than AGE (or configure `cache limit`)",
                     markup=False)
        raise typer.Exit(2)
    problem = store.writable_problem()
    if problem and not dry_run:
        _err().print(f"error: {problem}", markup=False, soft_wrap=True)
        raise typer.Exit(2)
    try:
        report = gc(store, max_size=limit, older_than_s=age, dry_run=dry_run)
    except CacheError as exc:
        _err().print(f"error: {exc}", markup=False, soft_wrap=True)
        raise typer.Exit(2) from None
    if fmt is Fmt.json:
        from .json_schemas import emit

        emit("cache_gc", {**report.to_dict(), "root_source": source, "limit_source": limit_source})
        return
    console = _out()
    _say_root(console, store, source)
    verb = "would evict" if dry_run else "evicted"
    for r in report.removed:
        console.print(f"{verb} {r['name']} [{r['key'][:12]}] ({human_bytes(r['bytes'])}): {r['why']}", markup=False,
                      soft_wrap=True)
    limit_text = f"; limit {human_bytes(limit)} (from {limit_source})" if limit else ""
    console.print(f"{verb} {len(report.removed)} entries, kept {report.kept}; {human_bytes(report.bytes_before)} -> "
                  f"{human_bytes(report.bytes_after)}{limit_text}", markup=False)
    if report.over_limit:
        console.print("still over the limit: what is left are tuning tables and the runtime libraries kept kernels "
                      "link", markup=False)


@app.command("limit")
def limit_cmd(
    size: Optional[str] = typer.Argument(None, help="New limit (500M, 2G, 1.5GiB), or 'none' to remove it; "
                                         "without it: show the limit."),
    cache: Optional[Path] = CacheOpt,
    fmt: Fmt = FormatOpt,
) -> None:
    """Show or set the cache's size limit (kept in <root>/v1/config.json), which every build applies
    afterwards with `cache gc --max-size` (like `ccache -M`). $KERNELFORGE_CACHE_MAX_SIZE overrides it."""
    from kernelforge.cache.maintenance.gc import effective_limit, write_limit
    from kernelforge.cache.read.fsio import parse_size

    store, source = _open(cache, must_exist=size is not None and size != "none" and False)
    if size is not None:
        try:
            value = None if size.lower() in ("none", "0", "off") else parse_size(size)
        except ValueError as exc:
            _err().print(f"error: {exc}", markup=False)
            raise typer.Exit(2) from None
        problem = store.writable_problem()
        if problem:
            _err().print(f"error: {problem}", markup=False, soft_wrap=True)
            raise typer.Exit(2)
        write_limit(store, value)
    try:
        limit, limit_source = effective_limit(store)
    except ValueError as exc:
        _err().print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from None
    if fmt is Fmt.json:
        from .json_schemas import emit

        emit("cache_limit", {"root": str(store.root), "root_source": source, "max_size": limit,
                             "limit_source": limit_source})
        return
    _out().print(f"size limit of {store.root}: " + (f"{human_bytes(limit)} ({limit} bytes, from {limit_source})"
                                                    if limit else "none"), markup=False, soft_wrap=True)


TrustedKeysOpt = typer.Option(None, "--trusted-keys", help="File of trusted public keys (default: "
                                                            "$KERNELFORGE_TRUSTED_KEYS, else "
                                                            "~/.config/kernelforge/trusted-keys).")
RebuildSampleOpt = typer.Option(None, "--rebuild-sample", metavar="N|FRACTION",
                                help="Rebuild this many of the incoming kernels (or this fraction) with the "
                                     "local toolchain and compare bytes; a mismatch refuses the source (needs "
                                     "the build extra).")
AllowUnsignedOpt = typer.Option(False, "--allow-unsigned", help="Accept entries no trusted key signed from this "
                                                               "command's sources (their origin is recorded as "
                                                               "unsigned).")


def _auditor(sample: Optional[str]):
    """The --rebuild-sample check (None without the option); exit 2 with one line if unusable."""
    if sample is None:
        return None
    try:
        from kernelforge.build.audit import parse_sample, rebuild_auditor
        from kernelforge.spec.files import resolve_spec_paths

        return rebuild_auditor(parse_sample(sample), resolve_spec_paths(None),
                               say=lambda line: _err().print(f"note: {line}", markup=False))
    except ImportError as exc:
        _err().print(f"error: --rebuild-sample needs the build extra (pip install 'kernelforge[build]'): {exc}",
                     markup=False, soft_wrap=True)
    except (ValueError, CacheError) as exc:
        _err().print(f"error: {exc}", markup=False, soft_wrap=True)
    raise typer.Exit(2)


def _authority(trusted_keys: Optional[Path], allow_unsigned: bool):
    """The command's trust settings; exit 2 with one line if the trusted keys are unusable."""
    from kernelforge.cache.transfer.provenance import Authority

    try:
        return Authority.configured(trusted_keys, allow_unsigned)
    except CacheError as exc:
        _err().print(f"error: {exc}", markup=False, soft_wrap=True)
        raise typer.Exit(2) from None


@app.command("merge")
def merge_cmd(
    sources: List[Path] = typer.Argument(..., help="Source cache roots (e.g. the shards of a release build)."),
    cache: Optional[Path] = CacheOpt,
    trusted_keys: Optional[Path] = TrustedKeysOpt,
    allow_unsigned: bool = AllowUnsignedOpt,
    rebuild_sample: Optional[str] = RebuildSampleOpt,
    dry_run: bool = typer.Option(False, "--dry-run", "-n", help="Write nothing: run every check (signatures, "
                                 "files re-hashed, conflicts) and list what would be merged or refused."),
    fmt: Fmt = FormatOpt,
) -> None:
    """Merge source caches into the cache: verified copies of entries a trusted key signed,
    published atomically; identical keys skipped; conflicting bytes for one key refused and
    quarantined (exit 1, both sha256s named). --dry-run writes nothing."""
    from kernelforge.cache.transfer.merge import merge

    authority = _authority(trusted_keys, allow_unsigned)
    audit = _auditor(rebuild_sample)
    store, source = _open(cache, must_exist=False)
    missing = [s for s in sources if not s.is_dir()]
    if missing:
        _err().print(f"error: source cache {missing[0]} is not a directory", markup=False, soft_wrap=True)
        raise typer.Exit(2)
    try:
        report = merge(sources, store, authority, audit, dry_run=dry_run)
    except CacheError as exc:
        _err().print(f"error: {exc}", markup=False, soft_wrap=True)
        raise typer.Exit(2) from None
    if fmt is Fmt.json:
        from .json_schemas import emit

        emit("cache_merge", {**report.to_dict(), "root_source": source, "dry_run": dry_run})
        raise typer.Exit(0 if report.ok else 1)
    console = _out()
    _say_root(console, store, source)
    for note in report.notes:
        console.print(f"note: {note}", markup=False, soft_wrap=True)
    for refused in report.refused:
        console.print(f"{'CONFLICT' if refused.conflict else 'REFUSED'}: {refused}", markup=False, soft_wrap=True)
    for place in report.quarantined:
        console.print(f"quarantined the conflicting incoming copy: {place}", markup=False, soft_wrap=True)
    for name in report.merged if dry_run else ():
        console.print(f"would merge {name}", markup=False, soft_wrap=True)
    console.print(f"{'dry run: would merge' if dry_run else 'merged'} {len(report.merged)}, identical "
                  f"{len(report.identical)}, conflicts {len(report.conflicts)}, refused "
                  f"{len(report.refused) - len(report.conflicts)} from {len(sources)} source(s)"
                  + ("; nothing was written" if dry_run else ""), markup=False)
    if not report.ok:
        raise typer.Exit(1)


# ---- transfers: remote stores (fsspec) and offline bundles. Each command declares its options and
# calls `_transfer`; the logic is kernelforge.cache.transfer (commands.run_transfer, remote, bundle) ----

OnlyOpt = typer.Option(None, "--only", help="Only entries whose name (or key) matches this glob; "
                                            "a kernel brings its runtime library.")


def _transfer(action: str, target: str | Path, cache: Optional[Path], fmt: Fmt, *,
              trusted_keys: Optional[Path] = None, allow_unsigned: bool = False, rebuild_sample: Optional[str] = None,
              **options) -> None:
    """The one body of push, pull, export and import: for a transfer that accepts entries, its trust
    settings and --rebuild-sample check (exit 2 if unusable); the cache (it must exist for a
    transfer that only reads it); `run_transfer(action, ...)` with the command's other options
    (exit 1: the source failed verification, 2: it cannot run); then the report (exit 1 on a
    refusal or a failed --verify)."""
    from kernelforge.cache.transfer.commands import TRANSFERS, run_transfer
    from kernelforge.cli import transfer

    if "authority" in TRANSFERS[action].options:  # pull, import: entries arrive, signatures are checked
        options.update(authority=_authority(trusted_keys, allow_unsigned), audit=_auditor(rebuild_sample))
    store, _ = _open(cache, must_exist=not TRANSFERS[action].writes_cache)
    transfer.show(transfer.run(run_transfer, action, store, target, **options), _out(), as_json=fmt is Fmt.json)


@app.command("push")
def push_cmd(url: str = typer.Argument(..., help="fsspec URL: file://, s3://, gs:// (HTTP is read-only)."),
             cache: Optional[Path] = CacheOpt, only: Optional[list[str]] = OnlyOpt,
             dry_run: bool = typer.Option(False, "--dry-run", "-n", help="Upload nothing: re-hash the local "
                                          "entries, read the remote, list what would be pushed."),
             fmt: Fmt = FormatOpt) -> None:
    """Upload the entries the remote lacks (blobs, then the entry, then the remote index)."""
    _transfer("push", url, cache, fmt, only=only, dry_run=dry_run)


@app.command("pull")
def pull_cmd(url: str = typer.Argument(..., help="fsspec URL: file://, s3://, gs://, http(s)://."),
             cache: Optional[Path] = CacheOpt, only: Optional[list[str]] = OnlyOpt,
             trusted_keys: Optional[Path] = TrustedKeysOpt, allow_unsigned: bool = AllowUnsignedOpt,
             rebuild_sample: Optional[str] = RebuildSampleOpt,
             dry_run: bool = typer.Option(False, "--dry-run", "-n", help="Write nothing: read the remote's "
                                          "index and signatures, check each entry (signature, conflicts), list "
                                          "what would be pulled; no file is downloaded."),
             fmt: Fmt = FormatOpt) -> None:
    """Download the entries this cache lacks that a trusted key signed; every file is re-hashed
    before it is published; a key held with other bytes is a conflict (quarantined, exit 1)."""
    _transfer("pull", url, cache, fmt, trusted_keys=trusted_keys, allow_unsigned=allow_unsigned,
              rebuild_sample=rebuild_sample, only=only, dry_run=dry_run)


@app.command("export")
def export_cmd(file: Path = typer.Argument(..., help="The bundle to write (.tar.gz)."),
               cache: Optional[Path] = CacheOpt, only: Optional[list[str]] = OnlyOpt, fmt: Fmt = FormatOpt) -> None:
    """Write a deterministic .tar.gz bundle of entries (re-hashed first) for offline machines."""
    _transfer("export", file, cache, fmt, only=only)


@app.command("import")
def import_cmd(file: Path = typer.Argument(..., help="A bundle written by `cache export`."),
               cache: Optional[Path] = CacheOpt,
               verify_after: bool = typer.Option(False, "--verify", help="Then verify the whole cache."),
               trusted_keys: Optional[Path] = TrustedKeysOpt, allow_unsigned: bool = AllowUnsignedOpt,
               rebuild_sample: Optional[str] = RebuildSampleOpt,
               dry_run: bool = typer.Option(False, "--dry-run", "-n", help="Write nothing: check the bundle "
                                            "and each entry (members, signatures, files re-hashed, conflicts), "
                                            "list what would be imported."),
               fmt: Fmt = FormatOpt) -> None:
    """Import a bundle's entries this cache lacks that a trusted key signed: safe members only,
    every file re-hashed; a key held with other bytes is a conflict (quarantined, exit 1)."""
    _transfer("import", file, cache, fmt, trusted_keys=trusted_keys, allow_unsigned=allow_unsigned,
              rebuild_sample=rebuild_sample, dry_run=dry_run, verify_after=verify_after)
