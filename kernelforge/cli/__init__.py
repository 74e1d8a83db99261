"""The `kernelforge` command: thin typer sub-apps over the library."""
from __future__ import annotations

import sys
from typing import Optional

import typer
import typer.core

from . import build as _build
from . import cache as _cache
from . import explain as _explain
from . import package as _package
from . import signing as _signing
from . import specs as _specs
from . import tune as _tune
from . import validate as _validate
from ._common import EXIT_CODES_HELP


class OneLineErrors(typer.core.TyperGroup):
    """The root command: a usage error (unknown option, missing or invalid value) is one line on
    stderr naming the command and exits 2, as every other error does; typer would print a
    multi-line box. Click's own handling is kept for everything else (`--help`, exit codes)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):  # noqa: ANN001
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except Exception as exc:
            # click's ClickException (typer may vendor click: matched by shape, not by class)
            if not (hasattr(exc, "format_message") and isinstance(getattr(exc, "exit_code", None), int)):
                raise
            where = exc.ctx.command_path if getattr(exc, "ctx", None) is not None else "kernelforge"
            message = " ".join(exc.format_message().split())
            if message:  # a bare group (`kernelforge cache`) has printed its help: nothing to add
                typer.echo(f"error: {where}: {message} (see `{where} --help`)", err=True)
            else:
                exc.show()
            sys.exit(exc.exit_code)
        if type(code).__name__ == "Abort":
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(help="Ahead-of-time CuTe-DSL kernel builds and a versioned artifact cache.\n\n" + EXIT_CODES_HELP
                  + "\n\nKERNELFORGE_LOG=info|debug traces which build and tuning choice serves each call.",
                  no_args_is_help=True, add_completion=True, cls=OneLineErrors)


def version_text() -> str:
    """kernelforge, toolchain, TVM-FFI ABI, default cache root, local GPU arch (where known)."""
    from kernelforge import __version__
    from kernelforge.cache.read.layers import running_versions
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
    """Device 0 as the CUDA driver sees it (libcuda through ctypes, honouring CUDA_VISIBLE_DEVICES).

    Not through torch: importing torch takes seconds, and `--version` must stay instant.
    """
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "none (no CUDA driver)"
    try:
        count, dev, major, minor = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
        rc = cuda.cuInit(0)
        if rc == 0:
            rc = cuda.cuDeviceGetCount(ctypes.byref(count))
        if rc == 100 or (rc == 0 and count.value == 0):  # CUDA_ERROR_NO_DEVICE
            return "none"
        if rc != 0:
            return f"none (CUDA driver error {rc})"
        name = ctypes.create_string_buffer(256)
        # 75, 76: CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, _MINOR
        if (cuda.cuDeviceGet(ctypes.byref(dev), 0) or cuda.cuDeviceGetName(name, len(name), dev)
                or cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)
                or cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)):
            return "unknown (CUDA driver query failed)"
        gpu = name.value.decode(errors="replace")
        return f"{gpu}, capability {major.value}.{minor.value} (arch sm_{major.value}{minor.value}a)"
    except Exception as exc:  # a driver without these entry points
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
    from kernelforge.cache.read.fsio import limits_problem

    problem = limits_problem()  # the size caps every command that reads the cache applies
    if problem:
        from ._common import fail

        fail(problem)


app.command("build", epilog=EXIT_CODES_HELP)(_build.build)
app.command("explain", epilog=EXIT_CODES_HELP)(_explain.explain)
app.command("validate")(_validate.validate)
app.command("tune")(_tune.tune)
app.command("package")(_package.package)
app.add_typer(_specs.app, name="specs")
app.add_typer(_cache.app, name="cache")
app.add_typer(_signing.app, name="key")
_cache.app.command("sign")(_signing.sign)


def _stdout_to_devnull() -> None:
    """Point fd 1 at /dev/null, so that the interpreter's last flush of stdout cannot fail again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno())
        os.close(devnull)
    except (OSError, AttributeError, ValueError):
        pass


def _from_broken_pipe(exc: BaseException) -> bool:
    """Whether `exc` was raised while handling an EPIPE (a write to a pipe whose reader is gone)."""
    import errno

    seen = 0
    cause = exc.__context__
    while cause is not None and seen < 8:
        if isinstance(cause, OSError) and cause.errno == errno.EPIPE:
            return True
        cause, seen = cause.__context__, seen + 1
    return False


def main() -> None:
    """The console script. A reader that closes the pipe early (`kernelforge cache ls | head -1`)
    ends the command quietly with exit 0, so that `set -o pipefail` scripts do not fail on it
    (https://docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    closed = False  # the reader went away mid-command: its output was cut, which is what it asked for
    try:
        app()  # standalone mode: ends in SystemExit
        code = 0
    except SystemExit as exc:
        code = exc.code
        # click (typer's core) and rich each turn EPIPE on a write into exit 1, raised while handling it
        closed = code not in (0, None) and _from_broken_pipe(exc)
    except BrokenPipeError:
        code, closed = 0, True
    try:
        sys.stdout.flush()  # what is still buffered, while a BrokenPipeError can be caught
    except BrokenPipeError:
        _stdout_to_devnull()  # the command's own exit status stands
    if closed:
        _stdout_to_devnull()
        code = 0
    raise SystemExit(code)
