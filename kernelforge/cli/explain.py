"""`kernelforge explain`: why a variant is (not) cached, or which build serves a call and why."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.console import Console

from ..cache.read.origin import origin_text
from ._common import fail

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}
ELEMENT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


class Fmt(str, Enum):
    text = "text"
    json = "json"


def explain(
    target: str = typer.Argument(..., help="A variant name or glob (e.g. 'quantize.mxfp8.*.sm_90a.t128u1'), or an "
                                 "op name (quantize, rmsnorm_quantize, ...) followed by call arguments."),
    args: Optional[List[str]] = typer.Argument(None, help="Call arguments KEY=VALUE: shape=4096x7168 (or m=, k=), "
                                               "dtype=, format=, layout=, scale_mode=, arch=sm_90a, align=BYTES "
                                               "(pointer alignment, default 256), stride=BYTES (row stride, default "
                                               "K * element size), device=NAME (for tuning tables); any other "
                                               "dispatch axis by name."),
    cache: Optional[Path] = typer.Option(None, "--cache", help="Cache root (default: the runtime's layers)."),
    spec: Optional[List[str]] = typer.Option(None, "--spec", help="Spec file(s) naming the variants."),
    arch: Optional[List[str]] = typer.Option(None, "--arch", help="Only variants of these arches."),
    fmt: Fmt = typer.Option(Fmt.text, "--format", help="text or json."),
) -> None:
    """Explain a cache hit or miss: for a VARIANT, whether it is cached (which layer, key) and, if
    not, which key ingredient changed against the nearest cached build; for an OP and call
    arguments, every cached candidate with why it was chosen or rejected (sources, arch, K-class,
    alignment, tuning). Exit 0 when it is served/cached, 1 when not, 2 for bad arguments."""
    from kernelforge.cache.read.layers import resolve_layers
    from kernelforge.sources import OP_SOURCES

    layers = resolve_layers(cache)
    if cache is not None and not layers[0].root.is_dir():
        fail(f"cache root {layers[0].root} does not exist")
    from kernelforge.errors import CacheError

    try:
        if target in OP_SOURCES:
            code = _explain_call(target, args or [], layers, fmt)
        else:
            if args:
                fail(f"{target!r} is not an op ({', '.join(sorted(OP_SOURCES))}); call arguments follow an op name")
            code = _explain_variants(target, spec, arch, layers, fmt)
    except CacheError as exc:  # an untrusted or unreadable cache: the runtime would refuse it too
        fail(str(exc))
    raise typer.Exit(code)


def _explain_variants(pattern: str, spec: Optional[List[str]], arch: Optional[List[str]], layers: list,
                      fmt: Fmt) -> int:
    from kernelforge.cache import CacheStore
    from kernelforge.cache.maintenance.keydiff import key_diff, nearest_entry
    from kernelforge.spec import load_specs, select
    from kernelforge.spec.files import resolve_spec_paths

    from ._common import select_or_exit
    from .specs import _nearest_names_hint

    try:
        paths = resolve_spec_paths(spec)
        every = load_specs(paths)
    except ValueError as exc:
        fail(str(exc))
    if not select(every, only=[pattern]):
        fail(f"no variant is named {pattern!r}{_nearest_names_hint(pattern, [v.name for v in every])}")
    variants = select_or_exit(paths, [pattern], arch)
    try:
        from kernelforge.build.keys import variant_key
        from kernelforge.build.toolchain import toolchain

        tc = toolchain()
    except Exception as exc:
        fail(f"explaining a variant needs its cache key, hence the build toolchain: {exc}")
    from kernelforge.sources import source_hash

    stores = [(CacheStore(layer.root), layer) for layer in layers if layer.root.is_dir()]
    from kernelforge.cache.read.trust import TrustedRoot

    for store, layer in stores:  # a cache the runtime refuses to read serves nothing: say so (UntrustedCache)
        if layer.source != "wheel" and store.layout.schema_root.is_dir():
            TrustedRoot(store.root).open_dir([store.layout.schema_root.name])
    indexes = [(store.index(), layer) for store, layer in stores]
    results = []
    for v in variants:
        canonical, src = v.canonical(), source_hash(v.op)
        key = variant_key(canonical, src, tc)
        row: dict[str, Any] = {"name": v.name, "key": key, "cached": False, "layer": None, "reason": "", "diff": [],
                               "refused": []}
        for index, layer in indexes:
            if key in index:
                if layer.refused:  # listed, never served
                    row["refused"].append(f"held by {layer.label} ({layer.root}), REFUSED: {layer.refused}")
                    continue
                e = index[key]
                row.update(cached=True, layer=layer.label,
                           reason=f"cached, built {e.created} in {e.build_time_s:.2f}s; {origin_text(e.extra)}")
                break
        else:
            entries = [e for index, _ in indexes for e in index.values()]
            near = nearest_entry(entries, v.name, v.op, str(v.get("arch")), canonical)
            if near is None:
                row["reason"] = "not built: no cached build of this op and arch"
            else:
                row["nearest"] = {"name": near.name, "key": near.key}
                row["diff"] = key_diff(near, canonical, src, tc) or ["entry format"]
                row["reason"] = ("not built: its last build had other key ingredients" if near.name == v.name
                                 else f"not built; nearest cached build: {near.name}")
        results.append(row)
    if fmt is Fmt.json:
        from .json_schemas import emit

        emit("explain_variants", {"variants": results})
    else:
        out = Console(highlight=False, soft_wrap=True)
        for row in results:
            out.print(f"{row['name']} [{row['key'][:12]}]: "
                      + (f"HIT in layer {row['layer']} ({row['reason']})" if row["cached"]
                         else f"MISS: {row['reason']}"),
                      markup=False)
            for line in row["diff"]:
                out.print(f"  changed: {line}", markup=False)
            for line in row["refused"]:
                out.print(f"  {line}", markup=False)
    return 0 if all(r["cached"] for r in results) else 1


def _no_kernel_of(op: str, layers: list, table: Any) -> str:
    """Why no layer serves any `op` kernel: the layers read, every refused kernel wheel with why
    (its kernels are never served), and what gets kernels here: a build needs the build extra."""
    from kernelforge import __version__
    from kernelforge.config import build_extra_install, can_build

    read = ", ".join(str(r.root) for r in table.readers) or "none"
    text = f"no layer holds any {op} kernel (layers read: {read})"
    refused = [layer for layer in layers if layer.refused]
    if refused:
        text += "; " + "; ".join(f"REFUSED {layer.label} ({layer.root}): {layer.refused}" for layer in refused)
    if can_build():
        return text + f"; build it: kernelforge build --only '{op}.*'"
    return (text + f"; this environment cannot compile kernels (nvidia-cutlass-dsl is not installed): install the "
            f"kernel wheel(s) built for kernelforge {__version__}, or `{build_extra_install()}` and "
            f"`kernelforge build --only '{op}.*'`")


def _explain_call(op: str, args: List[str], layers: list, fmt: Fmt) -> int:
    from kernelforge.formats import FORMATS
    from kernelforge.registry import get_family
    from kernelforge.runtime.dispatch import DispatchTable
    from kernelforge.runtime.explain import capability_of, dispatch_axes, explain_call, parse_shape

    kv: dict[str, str] = {}
    for a in args:
        if "=" not in a:
            fail(f"call argument {a!r}: expected KEY=VALUE (e.g. shape=4096x7168)")
        k_, v_ = a.split("=", 1)
        kv[k_.strip().lower()] = v_.strip()
    try:
        m, k = parse_shape(kv.pop("shape")) if "shape" in kv else (int(kv.pop("m", "128")), int(kv.pop("k", "0")))
        if "m" in kv or "k" in kv:
            m, k = int(kv.pop("m", m)), int(kv.pop("k", k))
        arch = kv.pop("arch", "sm_90a")
        capability = capability_of(arch)
        align = int(kv.pop("align", "256"))
        device = kv.pop("device", "")
        stride = kv.pop("stride", None)
    except (ValueError, KeyError) as exc:
        fail(str(exc))
    if k <= 0:
        fail("give the input's shape: shape=MxK (or k=K)")
    if m < 0:
        fail(f"m={m}: expected a number of rows >= 0")
    if align <= 0 or align & (align - 1):
        fail(f"align={align}: expected the pointer's alignment in bytes, a power of two (e.g. 16, 256)")
    if stride is not None and (not stride.isdigit() or int(stride) <= 0):
        fail(f"stride={stride}: expected the row stride in bytes, a positive integer")
    if "dtype" in kv:
        kv["dtype"] = DTYPES.get(kv["dtype"], kv["dtype"])
    # A quantizing op needs its format (K in blocks of its size); an op of no format axis (a plugin's
    # normalization, say) dispatches on K in elements.
    fmt_name = kv.get("format", "")
    quantizing = "format" in get_family(op).schema.dispatch_axes
    if quantizing:
        if fmt_name not in FORMATS:
            fail(f"format={fmt_name or '?'}: expected one of {sorted(FORMATS)}")
        kv.setdefault("layout", "linear")
        kv.setdefault("scale_mode", "none" if FORMATS[fmt_name].has_global_scale else "floor")
    block = FORMATS[fmt_name].block if quantizing else 1
    table = DispatchTable(layers=layers)
    axes = dispatch_axes(table, op)
    if not axes:
        fail(_no_kernel_of(op, layers, table), 1)
    unknown = sorted(set(kv) - set(axes))
    missing = sorted(set(axes) - set(kv))
    if unknown or missing:
        known = ", ".join(a + " (" + "|".join(sorted(axes[a])) + ")" for a in sorted(axes))
        fail(f"{op} dispatches on {known}" + (f"; unknown: {', '.join(unknown)}" if unknown else "")
             + (f"; missing: {', '.join(missing)}" if missing else ""))
    stride_bytes = int(stride) if stride is not None else k * ELEMENT_BYTES.get(kv.get("dtype", ""), 2)
    staged = None
    if op == "quantize_columnwise" and kv.get("layout") == "linear":
        from kernelforge.families.scale_layout.staging import staged_shape

        measured = table.staging_rule(device, arch) if device else None
        if staged_shape(fmt_name, FORMATS[fmt_name].block, m, k, kv.get("outputs") == "dual",
                        kv.get("transform", "none"), measured):
            kv["layout"] = "swizzled"  # what runs; the pass then writes the linear scales
            by = (f"the staging rule of the tuning table of {device!r}" if measured is not None else
                  "the shipped rule, kernelforge/families/scale_layout/staging.py")
            staged = (f"linear scales are staged at this shape ({by}): "
                      "the swizzled build explained here runs, then the scale_layout pass rewrites its scales "
                      "row-major (with 16-byte aligned, contiguous scale buffers; the direct linear build "
                      "otherwise, or when the cache lacks the pass)")
    ex = explain_call(table, op, kv, capability, k, block, align, stride_bytes, m, device)
    if fmt is Fmt.json:
        from .json_schemas import emit

        emit("explain_call", {**ex.to_dict(), "staged": staged})
    else:
        out = Console(highlight=False, soft_wrap=True)
        desc = ", ".join(f"{a}={v}" for a, v in sorted(kv.items()))
        out.print(f"{op} [{desc}] M={m} K={k} pointer {align}-byte aligned, row stride {stride_bytes} bytes, "
                  f"on {arch} (capability {capability[0]}.{capability[1]}){' ' + repr(device) if device else ''}",
                  markup=False)
        if staged:
            out.print(f"note: {staged}", markup=False)
        for v in ex.verdicts:
            out.print(f"  {v.status.upper():11} {v.name} [{v.key[:12]}] ({v.layer}): {v.why}", markup=False)
        if ex.chosen is not None:
            out.print(f"served by {ex.chosen.name} [{ex.chosen.key[:12]}] from {ex.chosen.layer}", markup=False)
        else:
            out.print(f"MISS: {ex.miss}", markup=False)
    return 0 if ex.chosen is not None else 1
