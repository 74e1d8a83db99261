"""Load cached modules: prove each file is the one the index names, then load that very file.

A module is opened through the trust policy (`cache/read/trust.py`: plain names below the root, no
symlink followed, owner and mode checked), its sha256 is computed on the open descriptor and
compared with the index and with the entry's own meta.json, and the dynamic linker then loads
`/proc/self/fd/N`, the same open file: a rename between the check and the load cannot swap it
(writing into the file in place needs write permission, which the policy denies to others).
Loading the descriptor is as fast as loading by path; copying into a sealed memfd first would
add a copy of every library to each load.

A kernel's runtime library is loaded first, the same way, from the entry its index entry
names: the module's DT_NEEDED then matches that library's soname and the dynamic linker never
searches RUNPATH for it. A kernel whose runtime entry is missing is refused.

A descriptor is closed once its file is loaded, so loading modules holds no descriptors. The
dynamic linker identifies loaded objects by the name they were loaded by, and descriptor
numbers are reused: every load therefore gets a name no earlier load had, the same
`/proc/self/fd/N` spelled with more slashes after `fd/` (the kernel's path walk ignores them).
Holding one descriptor per module instead grows a process's descriptor table past 64 entries
after a few ops in a fresh torch process, and the kernel grows a shared table only after an RCU
grace period, a stall in that op's first call (docs/performance.md; `benchmarks/diag.py
startup-stall`).

The runtime library is imported as a Python extension: its launcher (build/launch.c) calls the
kernels' TVM-FFI entry points with torch tensors. The tvm_ffi Python package is never imported
(its import would dominate the first call): only its C library, libtvm_ffi.so, which the kernels and the launcher
link against, is loaded (globally, as tvm_ffi itself loads it, so that both share one copy).
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib.machinery
import importlib.util
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from ..cache.read.layout import META_NAME, SCHEMA_VERSION, Layout, runtime_lib_name
from ..cache.read.trust import MissingCacheFile, TrustedRoot, check_component
from ..errors import CacheError, CorruptArtifact

_lock = threading.Lock()
_modules: dict[tuple[str, str], Any] = {}  # (key, sha256) -> loaded kernel (a launcher Kernel)
_runtimes: dict[tuple[str, str], Any] = {}  # (key, sha256) -> a runtime library's launcher module
_fd_name_slashes: dict[int, int] = {}  # descriptor number -> slashes its next load name gets
_log = logging.getLogger("kernelforge.runtime.loader")
_tvm_ffi_lib: list[ctypes.CDLL] = []
LAUNCH_MODULE = "kernelforge_launch"  # the runtime library's Python module name (build/launch.c)
ENTRY_PREFIX = "__tvm_ffi_"  # a kernel symbol's TVM-FFI entry point


def tvm_ffi_library() -> ctypes.CDLL:
    """libtvm_ffi.so of the installed apache-tvm-ffi, loaded globally (without importing tvm_ffi)."""
    if not _tvm_ffi_lib:
        spec = importlib.util.find_spec("tvm_ffi")  # finds the package; runs none of it
        if spec is None or not spec.submodule_search_locations:
            raise CacheError("apache-tvm-ffi is not installed: kernelforge's runtime needs its libtvm_ffi.so "
                             "(pip install apache-tvm-ffi)")
        path = Path(spec.submodule_search_locations[0]) / "lib" / "libtvm_ffi.so"
        try:
            _tvm_ffi_lib.append(ctypes.CDLL(str(path), mode=os.RTLD_GLOBAL))
        except OSError as exc:
            raise CacheError(f"cannot load {path} ({exc}); reinstall apache-tvm-ffi") from None
    return _tvm_ffi_lib[0]


def fresh_fd_name(fd: int) -> str:
    """A `/proc/self/fd/N` name for loading descriptor `fd` that no earlier load of this process used.

    At least one extra slash: a plain `/proc/self/fd/N` another library loaded by stays apart."""
    slashes = _fd_name_slashes.get(fd, 1)
    _fd_name_slashes[fd] = slashes + 1
    return "/proc/self/fd/" + "/" * slashes + str(fd)


def fix_command(root: Any, entry: dict[str, Any]) -> str:
    """The one command that repairs a damaged or missing entry like `entry`."""
    if entry.get("kind") == "kernel":
        return f"kernelforge build --verify --cache {root} --arch {entry.get('arch')} --only '{entry.get('name')}'"
    return f"kernelforge build --verify --cache {root}"


def entry_parts(entry: dict[str, Any], root: Any = "ROOT") -> tuple[str, ...]:
    """The path components (below the cache root) of an entry's main file, from its key and kind.

    Raises CorruptArtifact if the entry's stored path or main file name is anything else: the
    index or its views were edited, which `cache repair` rebuilds from the entries' meta.json."""
    key, kind, name = entry.get("key"), entry.get("kind"), entry.get("name", "?")
    fix = f"fix: kernelforge cache repair --cache {root}"
    try:
        rel = Layout.entry_rel_of(key, kind)  # type: ignore[arg-type]
        main = check_component(entry.get("main_file"), "main file")  # type: ignore[arg-type]
    except CacheError as exc:
        raise CorruptArtifact(f"cache entry {name}: {exc}; {fix}") from None
    if entry.get("path") != rel:
        raise CorruptArtifact(f"cache entry {name} [{str(key)[:12]}] names the path {entry.get('path')!r}, "
                              f"not {rel!r} where its key lives; {fix}")
    return (f"v{SCHEMA_VERSION}", *rel.split("/"), main)


def open_verified(trusted: TrustedRoot, entry: dict[str, Any], what: str) -> int:
    """A descriptor of the entry's main file whose bytes match the index and the entry's meta.json.

    The caller owns the descriptor (positioned at 0)."""
    parts = entry_parts(entry, trusted.root)
    expected = entry.get("sha256")
    hint = fix_command(trusted.root, entry)
    where = trusted.root.joinpath(*parts[:-1])
    try:
        dfd = trusted.open_dir(parts[:-1])
    except MissingCacheFile as exc:
        raise CorruptArtifact(f"{what} {entry.get('name')}: {exc}; fix: {hint}") from None
    try:
        try:
            fd = trusted.open_file_at(dfd, parts[-1], where)
        except MissingCacheFile as exc:
            raise CorruptArtifact(f"{what} {entry.get('name')}: {exc}; fix: {hint}") from None
        try:
            h = hashlib.sha256()
            while chunk := os.read(fd, 1 << 20):
                h.update(chunk)
            digest = h.hexdigest()
            if digest != expected:
                raise CorruptArtifact(
                    f"{what} {where / parts[-1]} is corrupt: sha256 {digest[:16]}... does not match "
                    f"the recorded {str(expected)[:16]}...; fix: {hint}")
            _check_meta(trusted, entry, dfd, where, parts[-1], digest, hint, what)
            os.lseek(fd, 0, os.SEEK_SET)
        except BaseException:
            os.close(fd)
            raise
    finally:
        os.close(dfd)
    return fd


def _check_meta(trusted: TrustedRoot, entry: dict[str, Any], dfd: int, where: Any, main: str, digest: str,
                hint: str, what: str) -> None:
    # The entry's own record, written with its files: an index (or dispatch view) edited to
    # name other bytes disagrees with it.
    try:
        mfd = trusted.open_file_at(dfd, META_NAME, where)
        with os.fdopen(mfd, "rb") as f:
            meta = json.loads(f.read())
        recorded = meta["files"][main]["sha256"]
        key = meta["key"]
    except (CacheError, ValueError, KeyError, TypeError) as exc:
        raise CorruptArtifact(f"{what} {entry.get('name')}: its {META_NAME} is unusable ({exc}); fix: {hint}") from None
    if key != entry.get("key") or recorded != digest:
        raise CorruptArtifact(f"{what} {entry.get('name')}: the index and the entry's {META_NAME} disagree "
                              f"about its key or sha256; fix: {hint}")


def read_verified_json(trusted: TrustedRoot, entry: dict[str, Any]) -> Any:
    """The JSON content of an entry's main file, after proving it is the file the index names."""
    fd = open_verified(trusted, entry, entry.get("kind", "cache") + " file")
    with os.fdopen(fd, "rb") as f:
        return json.loads(f.read())


def _load_runtime(trusted: TrustedRoot, entry: dict[str, Any], runtime_entry: dict[str, Any] | None) -> Any:
    """The launcher module of the runtime library `entry` links (loaded once per process)."""
    rkey = (entry.get("extra") or {}).get("runtime_key", "")
    hint = fix_command(trusted.root, entry)
    if runtime_entry is None or runtime_entry.get("key") != rkey:
        raise CorruptArtifact(
            f"kernel module {entry.get('name')} links runtime library {str(rkey)[:12]}, which is not in the "
            f"cache index (refused rather than left to the dynamic linker's search); fix: {hint}")
    if runtime_entry.get("main_file") != runtime_lib_name(rkey):
        raise CorruptArtifact(f"runtime library entry {rkey[:12]} names the file {runtime_entry.get('main_file')!r}, "
                              f"not {runtime_lib_name(rkey)!r}; fix: {hint}")
    ident = (rkey, runtime_entry["sha256"])
    if ident in _runtimes:
        return _runtimes[ident]
    tvm_ffi_library()
    fd = open_verified(trusted, runtime_entry, "runtime library")
    try:
        loader = importlib.machinery.ExtensionFileLoader(LAUNCH_MODULE, fresh_fd_name(fd))
        spec = importlib.util.spec_from_loader(LAUNCH_MODULE, loader)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        loader.exec_module(module)
        module.Kernel  # noqa: B018 - a runtime library from before the launcher has none
    except (ImportError, OSError, AttributeError) as exc:
        if "PyInit_" in str(exc) or isinstance(exc, AttributeError):
            raise CorruptArtifact(
                f"runtime library {rkey[:12]} predates the launcher (built by an older kernelforge); fix: "
                f"kernelforge build --cache {trusted.root} --arch {entry.get('arch')} "
                f"(then `kernelforge cache clean --stale --cache {trusted.root}` drops the old builds)") from None
        raise CorruptArtifact(f"runtime library {rkey[:12]} cannot be loaded ({exc}); fix: {hint}") from None
    finally:
        os.close(fd)
    _runtimes[ident] = module
    return module


def load_function(trusted: TrustedRoot, entry: dict[str, Any], runtime_entry: dict[str, Any] | None) -> Any:
    """The kernel of an entry (a runtime dict: key, kind, path, main_file, sha256, extra), a
    callable taking torch tensors, ints, floats and None (build/launch.c)."""
    ident = (entry.get("key", ""), entry.get("sha256", ""))
    with _lock:
        kernel = _modules.get(ident)
        if kernel is None:
            t0 = time.perf_counter()
            had_runtime = len(_runtimes)
            launcher = _load_runtime(trusted, entry, runtime_entry)
            symbol = str((entry.get("extra") or {}).get("symbol"))
            fd = open_verified(trusted, entry, "kernel module")
            try:
                handle = ctypes.CDLL(fresh_fd_name(fd), mode=os.RTLD_LOCAL)
                address = ctypes.cast(getattr(handle, ENTRY_PREFIX + symbol), ctypes.c_void_p).value
            except (OSError, AttributeError) as exc:
                raise CorruptArtifact(f"kernel module {entry.get('name')} cannot be loaded ({exc}); "
                                      f"fix: {fix_command(trusted.root, entry)}") from None
            finally:
                os.close(fd)
            kernel = _modules[ident] = launcher.Kernel(address, symbol, handle)
            if _log.isEnabledFor(logging.INFO):
                rt = " (and its runtime library)" if len(_runtimes) > had_runtime else ""
                _log.info("loaded %s [%s] from %s in %.2f ms%s", entry.get("name"), str(entry.get("key"))[:12],
                          trusted.root, (time.perf_counter() - t0) * 1e3, rt)
    return kernel
