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

import functools
import json
import os
import warnings
from pathlib import Path
from typing import Any, NamedTuple

from kernelforge import registry
from kernelforge.cache.read import installed, wheel_discovery
from kernelforge.cache.read.fsio import read_regular
from kernelforge.cache.read.trust import TrustedRoot
from kernelforge.cache.read.wheel_signature import check_wheel
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
    # A signed kernel wheel's dispatch manifest as its signature check read it: the runtime reads
    # the wheel through this copy alone (`cache.read.wheel_signature`). None: not a signed wheel.
    dispatch_manifest: bytes | None = None

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


def compatibility_problem(manifest: dict[str, Any], listing: dict[str, installed.Installed] | None = None,
                          running: dict[str, str] | None = None) -> str | None:
    """Why a kernel wheel's manifest does not match this process (one line), or None if it does
    (`running`: `running_versions(listing)` already made)."""
    if listing is None:
        listing = installed.installed()
    if running is None:
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


class _Opening:
    """What every wheel of one `wheel_layers` call shares, each read once: the writable root's
    trust policy, the installed distributions and kernel wheels (`cache.read.wheel_discovery`),
    the running versions and the trusted keys."""

    def __init__(self, memo_root: Path | None, full: bool) -> None:
        self.full = full
        self.memo = TrustedRoot(memo_root) if memo_root is not None else None
        self.listing, self.wheels = wheel_discovery.found(ENTRY_POINT_GROUP, self.memo)

    @functools.cached_property
    def running(self) -> dict[str, str]:
        return running_versions(self.listing)

    @functools.cached_property
    def trusted(self) -> Any:
        """The trusted keys, or None if they cannot be read: then each wheel's check reads them
        itself and is refused with the reason."""
        from kernelforge.cache.read.trusted_keys import SigningError, trusted_keys

        try:
            return trusted_keys()
        except SigningError:
            return None


def _wheel_layer(ep: installed.KernelEntryPoint, package: Path | None, opening: _Opening) -> Layer | None:
    label = f"wheel {ep.distribution} {ep.version}"
    if package is None:
        return Layer(Path(ep.value), "wheel", label, False, f"its package {ep.value!r} is not importable")
    root = package / WHEEL_CACHE_DIR
    try:  # read_regular: a FIFO there is refused, never waited on
        manifest = json.loads(read_regular(package / WHEEL_MANIFEST, 64 << 20, follow=True))
        if not isinstance(manifest, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        return Layer(root, "wheel", label, False, f"its {WHEEL_MANIFEST} is unusable ({exc})")
    problem = compatibility_problem(manifest, opening.listing, opening.running)
    if problem:
        problem += "; install the kernel wheel built for this kernelforge"
        return Layer(root, "wheel", label, False, problem, manifest)
    check = check_wheel(package, ep.distribution, opening.memo, trusted=opening.trusted, full=opening.full)
    return Layer(root, "wheel", label, False, check.refused, manifest, check.signer, check.manifest)


def wheel_layers(memo_root: Path | None = None, *, full: bool = True) -> list[Layer]:
    """Installed kernel wheels, in a stable order (package, then entry-point name): every entry
    point of the group, one layer per package (several kernel wheels, e.g. the built-in ops' and
    a plugin's of one arch, are all layers). `memo_root`: the writable cache root, where the
    signatures verified and the wheels found are remembered; `full`: check every file the
    statement binds, not only those the runtime reads (`cache.read.wheel_signature.check_wheel`)."""
    opening = _Opening(memo_root, full)
    layers = [_wheel_layer(ep, package, opening)
              for ep, package in sorted(opening.wheels, key=lambda w: (w[0].value, w[0].name))]
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
    skip the check, and of a signed wheel only the files the runtime reads are checked. Reports
    and `cache verify` leave it False: they check every signature and every file it binds, and
    write nothing."""
    root, source = resolve_cache_root(cli_value)
    first = Layer(root, source, source, True)
    if source in EXPLICIT_SOURCES:
        return [first]
    return [first, *wheel_layers(root if remember else None, full=not remember)]


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

