"""`kernelforge package`: installable kernel wheels from a built cache, per arch and per distribution."""
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
    dist: Optional[List[str]] = typer.Option(None, "--dist", help="Only the kernels of these distributions: "
                                             "'kernelforge' (the built-in ops), a plugin's "
                                             "(e.g. kernelforge-silu-quant) or a kernel wheel's "
                                             "(e.g. kernelforge-kernels-sm90a)."),
    cache: Optional[str] = typer.Option(None, "--cache", help="Cache root (else $KERNELFORGE_CACHE_DIR, the "
                                        "checkout's cache/, or ~/.cache/kernelforge)."),
    out: Path = typer.Option(Path("dist"), "--out", help="Directory the wheels are written into."),
    sign_key: Optional[Path] = typer.Option(None, "--sign-key", help="Sign each wheel with this private key "
                                            "(`kernelforge key generate`); nodes refuse unsigned kernel wheels "
                                            "unless they opt in (KERNELFORGE_ALLOW_UNSIGNED)."),
) -> None:
    """Write one kernel wheel per arch and distribution: kernelforge_kernels_<arch>-<version>-cp310-abi3-
    manylinux_2_34_<machine>.whl for the built-in ops, <plugin>_kernels_<arch>-<plugin version>-... for each
    installed op-family plugin whose kernels the cache holds. Each holds its kernels, the runtime libraries
    they link, its ops' tuning tables, an index and SHA256SUMS. $SOURCE_DATE_EPOCH sets the zip timestamps
    and the entries' `created`. One line per wheel written."""
    from ..release.kernels import package_wheel, plan_wheels

    signer = None
    if sign_key is not None:
        from ..cache.read.signing import load_signing_key

        try:
            signer = load_signing_key(sign_key)
        except CacheError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None

    root, source = resolve_cache_root(cache)
    if not (root / "v1").is_dir():
        typer.echo(f"error: cache root {root} (from {source}) holds no cache; run `kernelforge build` first", err=True)
        raise typer.Exit(2)
    problem = _out_problem(out)
    if problem:
        typer.echo(f"error: --out {out}: {problem}", err=True)
        raise typer.Exit(2)
    store = CacheStore(root)
    try:
        wheels = plan_wheels(store, arch or None, distributions=dist or None)
    except (CacheError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    if not wheels:
        which = f" of {', '.join(dist)}" if dist else ""
        typer.echo(f"error: the cache {root} holds no kernel{which} built from the installed kernel sources",
                   err=True)
        raise typer.Exit(2)
    for wheel in wheels:
        try:
            written = package_wheel(store, wheel, out, signer=signer)
        except (CacheError, ValueError) as exc:
            typer.echo(f"error: {wheel.distribution}: {exc}", err=True)
            raise typer.Exit(1) from None
        except OSError as exc:  # --out filled up or went away meanwhile
            typer.echo(f"error: {wheel.distribution}: cannot write the wheel into --out {out}: "
                       f"{exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else ""), err=True)
            raise typer.Exit(2) from None
        typer.echo(f"{written.path}: {written.kernels} kernels, {written.runtimes} runtime libraries, "
                   f"{written.tuning} tuning tables, {written.bytes / 2**20:.1f} MiB, "
                   + (f"signed by key {signer.public.key_id}" if signer else "UNSIGNED"))


def _out_problem(out: Path) -> str | None:
    """Why the wheels cannot be written into `out` (created if missing), or None: checked before any
    wheel is assembled, by creating and removing a file there (permission bits do not stop root;
    an immutable directory or /proc does)."""
    import tempfile

    if out.exists() and not out.is_dir():
        return "expected a directory to write the wheels into; it exists and is not a directory"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot create the directory ({exc.strerror or exc})"
    try:
        with tempfile.NamedTemporaryFile(dir=out, prefix=".kernelforge-probe-"):
            pass
    except OSError as exc:
        return f"cannot write into the directory ({exc.strerror or exc})"
    return None
