"""`kernelforge key generate` and `kernelforge cache sign`: release keys and signed manifests
(`kernelforge.cache.read.signing`; the README's "Shipping kernels" says where each step runs)."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

from kernelforge.errors import CacheError

app = typer.Typer(help="Release signing keys (ed25519).", no_args_is_help=True)


def _fail(message: str, code: int) -> None:
    Console(stderr=True, highlight=False).print(f"error: {message}", markup=False, soft_wrap=True)
    raise typer.Exit(code)


@app.command("generate")
def generate(path: Path = typer.Argument(..., help="Where to write the private key (PATH.pub gets the public key)."),
             comment: str = typer.Option("", "--comment", help="A note kept after the public key (e.g. its owner).")
             ) -> None:
    """Write a new ed25519 key pair: PATH (private, mode 0600; keep it in your CI's secrets) and
    PATH.pub (one line to add to the trusted-keys file of every machine that receives kernels)."""
    from kernelforge.cache.read.signing import generate_key

    try:
        public = generate_key(path, comment)
    except CacheError as exc:
        _fail(str(exc), 2)
    typer.echo(f"wrote {path} (private) and {path}.pub (public, key id {public.key_id})")


def sign(key: Path = typer.Option(..., "--key", help="Private key file (`kernelforge key generate`)."),
         cache: Optional[Path] = typer.Option(None, "--cache", help="Cache root (default as for the other "
                                                                    "cache commands)."),
         only: Optional[List[str]] = typer.Option(None, "--only", help="Only entries whose name (or key) "
                                                                       "matches this glob; a kernel brings its "
                                                                       "runtime library.")
         ) -> None:
    """Sign the cache's entries: re-hash each, then write one manifest (key -> sha256 of each file)
    signed with KEY into v1/signatures/. merge, import, pull and installed kernel wheels accept
    entries only when a trusted key signed them."""
    from kernelforge.cache import CacheStore
    from kernelforge.cache.read.signing import load_signing_key
    from kernelforge.cache.transfer.provenance import sign_cache
    from kernelforge.config import resolve_cache_root

    root, source = resolve_cache_root(cache)
    if not (root / "v1").is_dir():
        _fail(f"cache root {root} (from {source}) holds no cache", 2)
    try:
        signing_key = load_signing_key(key)
        path, count, refused = sign_cache(CacheStore(root), signing_key, only)
    except CacheError as exc:
        _fail(str(exc), 2)
    for line in refused:
        typer.echo(f"REFUSED: {line}")
    if path is None:
        _fail(f"nothing to sign in {root}", 1)
    typer.echo(f"signed {count} entries of {root} with key {signing_key.public.key_id}: {path}")
    if refused:
        raise typer.Exit(1)
