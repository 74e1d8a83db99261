"""`kernelforge package`: one installable kernel wheel per arch from a built cache."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..cache import CacheStore
from ..config import resolve_cache_root
from ..errors import CacheError


def package(
    arch: Optional[List[str]] = typer.Option(None, "--arch", help="Only these arches (default: every arch "
                                             "of the cache's kernels)."),
    cache: Optional[str] = typer.Option(None, "--cache", help="Cache root (else $KERNELFORGE_CACHE_DIR, the "
                                        "checkout's cache/, or ~/.cache/kernelforge)."),
    out: Path = typer.Option(Path("dist"), "--out", help="Directory the wheels are written into."),
) -> None:
    """Write kernelforge_kernels_<arch>-<version>-py3-none-manylinux_2_34_<machine>.whl per arch:
    its kernels, the runtime libraries they link, its tuning tables, an index and SHA256SUMS."""
    from ..release.kernels import default_archs, package_arch

    root, source = resolve_cache_root(cache)
    if not (root / "v1").is_dir():
        typer.echo(f"error: cache root {root} (from {source}) holds no cache; run `kernelforge build` first", err=True)
        raise typer.Exit(2)
    store = CacheStore(root)
    archs = list(arch or default_archs(store))
    if not archs:
        typer.echo(f"error: the cache {root} holds no kernel built from this kernelforge's sources", err=True)
        raise typer.Exit(2)
    for name in archs:
        try:
            wheel = package_arch(store, name, out)
        except (CacheError, ValueError) as exc:
            typer.echo(f"error: {name}: {exc}", err=True)
            raise typer.Exit(1) from None
        typer.echo(f"{wheel.path}: {wheel.kernels} kernels, {wheel.runtimes} runtime libraries, "
                   f"{wheel.tuning} tuning tables, {wheel.bytes / 2**20:.1f} MiB")
