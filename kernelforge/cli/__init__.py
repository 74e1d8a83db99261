"""The `kernelforge` command: thin typer sub-apps over the library."""
from __future__ import annotations

from typing import Optional

import typer

from . import build as _build
from . import cache as _cache
from . import explain as _explain
from . import package as _package
from . import specs as _specs
from . import tune as _tune
from . import validate as _validate
from ._common import EXIT_CODES_HELP

app = typer.Typer(help="Ahead-of-time CuTe-DSL kernel builds and a versioned artifact cache.\n\n" + EXIT_CODES_HELP
                  + "\n\nKERNELFORGE_LOG=info|debug traces which build and tuning choice serves each call.",
                  no_args_is_help=True, add_completion=True)


def version_text() -> str:
    """kernelforge, toolchain, TVM-FFI ABI, default cache root, local GPU arch (where known)."""
    from kernelforge import __version__
    from kernelforge.cache.layers import running_versions
    from kernelforge.config import resolve_cache_root

    lines = [f"kernelforge {__version__}"]
    try:
        from kernelforge.build.toolchain import current_toolchain_id, toolchain

        tc = toolchain()
        dsl = ", ".join(f"{k} {v}" for k, v in sorted(tc.get("cutlass_dsl", {}).items()))
        lines.append(f"toolchain: {current_toolchain_id()[:16]} ({dsl or 'no cutlass-dsl'})")
    except Exception as exc:  # a runtime-only install has no build toolchain
        lines.append(f"toolchain: unavailable ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})")
    lines.append(f"tvm-ffi ABI: {running_versions()['tvm_ffi_abi'] or 'not installed'}")
    root, source = resolve_cache_root(None)
    lines.append(f"default cache root: {root} (from {source})")
    lines.append(f"local GPU: {_local_gpu()}")
    return "\n".join(lines)


def _local_gpu() -> str:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return "unknown (torch not installed)"
    try:
        import torch

        if not torch.cuda.is_available():
            return "none"
        major, minor = torch.cuda.get_device_capability(0)
        return f"{torch.cuda.get_device_name(0)}, capability {major}.{minor} (arch sm_{major}{minor}a)"
    except Exception as exc:
        return f"unknown ({exc})"


def _version(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit(0)


@app.callback()
def _main(version: Optional[bool] = typer.Option(None, "--version", "-V", callback=_version, is_eager=True,
                                                 help="Show versions (kernelforge, toolchain, TVM-FFI ABI), the "
                                                      "default cache root and the local GPU's arch, and "
                                                      "exit.")) -> None:
    pass


app.command("build", epilog=EXIT_CODES_HELP)(_build.build)
app.command("explain", epilog=EXIT_CODES_HELP)(_explain.explain)
app.command("validate")(_validate.validate)
app.command("tune")(_tune.tune)
app.command("package")(_package.package)
app.add_typer(_specs.app, name="specs")
app.add_typer(_cache.app, name="cache")


def main() -> None:
    app()
