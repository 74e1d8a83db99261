"""Stores as layers: which cache roots the runtime and the CLI read, in which order.

An explicit root (`set_cache_root(DIR)`, `--cache DIR`, `$KERNELFORGE_CACHE_DIR`) is the only
layer. Otherwise the layers are the checkout's or user's cache (the one writable layer), then
every installed kernel wheel (`kernelforge package`), found through the entry-point group
`kernelforge.kernels` of the installed `*-kernels-<arch>` distributions (`cache.read.installed`),
read-only. Every layer is a cache root of the same layout and keys.

A kernel wheel records the kernelforge version and the TVM-FFI ABI it was built for (a plugin's
kernel wheel also the plugin's distribution and version). A wheel that does not match the running
ones (or the installed plugin) is *refused*: it stays listed (with the reason) so that
`cache ls`/`stats` and a KernelNotBuilt error can say why its kernels are not served, the
runtime warns once, and no file of it is ever loaded.

Imports neither torch nor tvm_ffi (the CLI uses this on runtime-only nodes). Verifying a layer
(a kernel wheel's files against its SHA256SUMS too) is maintenance: `cache.maintenance.verification`.
"""

import importlib.util
import json
import os
import warnings
from pathlib import Path
from typing import Any, NamedTuple

from kernelforge import registry
from kernelforge.cache.read import installed
from kernelforge.cache.read.fsio import read_regular
from kernelforge.cache.read.wheel_signature import signature_status
from kernelforge.config import CACHE_ENV, resolve_cache_root

ENTRY_POINT_GROUP = "kernelforge.kernels"
WHEEL_MANIFEST = "kernelforge_kernels.json"  # inside the wheel's package: versions and toolchain
WHEEL_SUMS = "SHA256SUMS"  # inside the wheel's package: sha256 of every other file (sha256sum format)
WHEEL_CACHE_DIR = "cache"  # inside the wheel's package: the cache root
EXPLICIT_SOURCES = ("--cache", f"${CACHE_ENV}")  # a root named by the caller: the only layer


class Layer(NamedTuple):
    """One cache root the runtime reads (a NamedTuple: cheaper to create at import, see `Layout`).

    `source` is where it came from ("--cache", "$KERNELFORGE_CACHE_DIR", "checkout", "user" or
    "wheel"); `refused` says why the runtime will not serve it (None: it is used)."""

    root: Path
    source: str
    label: str
    writable: bool
    refused: str | None = None
    manifest: dict[str, Any] | None = None
    signer: str | None = None  # the key id that signed a kernel wheel (None: unsigned, or not a wheel)

    def to_dict(self) -> dict[str, Any]:
        return {"root": str(self.root), "source": self.source, "label": self.label,
                "writable": self.writable, "refused": self.refused, "signer": self.signer}


def running_versions(listing: dict[str, installed.Installed] | None = None) -> dict[str, str]:
    """The kernelforge version and TVM-FFI ABI (major.minor of apache-tvm-ffi) of this process
    (`listing`: an `installed.installed()` already made)."""
    from kernelforge import __version__  # read at each call (the package root, set before any layer is read)

    tvm = installed.version("apache-tvm-ffi", listing)
    abi = ".".join(tvm.split(".")[:2]) if tvm else ""
    return {"kernelforge": __version__, "tvm_ffi_abi": abi}


def compatibility_problem(manifest: dict[str, Any],
                          listing: dict[str, installed.Installed] | None = None) -> str | None:
    """Why a kernel wheel's manifest does not match this process (one line), or None if it does."""
    if listing is None:
        listing = installed.installed()
    running = running_versions(listing)
    problems = []
    if manifest.get("kernelforge") != running["kernelforge"]:
        problems.append(f"built for kernelforge {manifest.get('kernelforge')!s}, running {running['kernelforge']}")
    if running["tvm_ffi_abi"] and manifest.get("tvm_ffi_abi") != running["tvm_ffi_abi"]:
        problems.append(f"built for TVM-FFI ABI {manifest.get('tvm_ffi_abi')!s}, running {running['tvm_ffi_abi']}")
    families = manifest.get("families")  # a plugin's kernel wheel: {its distribution: version}
    for dist, version in sorted(families.items() if isinstance(families, dict) else ()):
        have = _plugin_version(str(dist), listing)
        if have != version:
            problems.append(f"built for {dist} {version!s}, "
                            + ("which is not installed" if have is None else f"installed {have}"))
    return "; ".join(problems) or None


def _plugin_version(dist: str, listing: dict[str, installed.Installed]) -> str | None:
    """The version of the installed distribution `dist`, else of op families registered from code
    under that name (`kernelforge.registry.register`, the op-family registry below the cache); None
    if neither."""
    have = installed.version(dist, listing)
    if have is not None:
        return have
    name = installed.canonical(dist)
    found = {f.version for f in registry._registered.values() if installed.canonical(f.distribution) == name}
    return found.pop() if len(found) == 1 else None


def _wheel_layer(ep: installed.KernelEntryPoint, listing: dict[str, installed.Installed],
                 memo_root: Path | None) -> Layer | None:
    label = f"wheel {ep.distribution} {ep.version}"
    try:
        # find_spec locates the package without running its code.
        spec = importlib.util.find_spec(ep.value)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    if not locations:
        return Layer(Path(ep.value), "wheel", label, False, f"its package {ep.value!r} is not importable")
    package = Path(locations[0])
    root = package / WHEEL_CACHE_DIR
    try:  # read_regular: a FIFO there is refused, never waited on
        manifest = json.loads(read_regular(package / WHEEL_MANIFEST, 64 << 20, follow=True))
        if not isinstance(manifest, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        return Layer(root, "wheel", label, False, f"its {WHEEL_MANIFEST} is unusable ({exc})")
    problem = compatibility_problem(manifest, listing)
    if problem:
        problem += "; install the kernel wheel built for this kernelforge"
        return Layer(root, "wheel", label, False, problem, manifest)
    problem, signer = signature_status(package, ep.distribution, memo_root)
    return Layer(root, "wheel", label, False, problem, manifest, signer)


def wheel_layers(memo_root: Path | None = None) -> list[Layer]:
    """Installed kernel wheels, in a stable order (package, then entry-point name): every entry
    point of the group, one layer per package (several kernel wheels, e.g. the built-in ops' and
    a plugin's of one arch, are all layers). `memo_root`: the writable cache root, where the
    signatures verified are remembered (`cache.read.wheel_signature`)."""
    listing = installed.installed()
    eps = installed.kernel_entry_points(ENTRY_POINT_GROUP, listing)
    layers = [_wheel_layer(ep, listing, memo_root) for ep in sorted(eps, key=lambda e: (e.value, e.name))]
    seen: set[Path] = set()
    out = []
    for layer in layers:
        if layer is not None and layer.root not in seen:  # one dist may name its package twice
            seen.add(layer.root)
            out.append(layer)
    return out


def resolve_layers(cli_value: str | os.PathLike[str] | None = None, *, remember: bool = False) -> list[Layer]:
    """The layers in lookup order: an explicit root alone, else the user/checkout cache and the wheels.

    `remember` (the runtime's first call): kernel-wheel signatures verified are remembered in the
    user/checkout cache (`cache.read.wheel_signature`), created if missing, so later processes
    skip the check. Reports and `cache verify` leave it False: they check every signature and
    write nothing."""
    root, source = resolve_cache_root(cli_value)
    first = Layer(root, source, source, True)
    if source in EXPLICIT_SOURCES:
        return [first]
    return [first, *wheel_layers(root if remember else None)]


_warned: set[Path] = set()


def warn_refused(layer: Layer) -> None:
    """One RuntimeWarning per process for a refused layer."""
    if layer.refused and layer.root not in _warned:
        _warned.add(layer.root)
        warnings.warn(f"kernelforge: not using kernel {layer.label} ({layer.root}): {layer.refused}",
                      RuntimeWarning, stacklevel=3)


def present_layers(cli_value: str | os.PathLike[str] | None = None) -> list[Layer]:
    """The layers that exist: an explicit root alone (even if missing: the caller reports it), else
    the user/checkout cache if it is a directory and every installed kernel wheel."""
    layers = resolve_layers(cli_value)
    if layers[0].source in EXPLICIT_SOURCES:
        return layers[:1]
    return [layer for layer in layers if layer.root.is_dir() or layer.source == "wheel"]

