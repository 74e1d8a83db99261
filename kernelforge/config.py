"""Settings with one precedence (CLI > environment > checkout > per-user) and where each came from."""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

CACHE_ENV = "KERNELFORGE_CACHE_DIR"
SPEC_ENV = "KERNELFORGE_SPEC_DIR"


def checkout_root() -> Path | None:
    """The source checkout holding this package (its pyproject.toml sits beside the package), else None."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() else None


def can_build() -> bool:
    """Whether this environment can compile kernels: CuTe-DSL (the `cutlass` package of
    nvidia-cutlass-dsl, the build extra) is installed. Found without importing it."""
    import importlib.util

    try:
        return importlib.util.find_spec("cutlass") is not None
    except (ImportError, ValueError):
        return False


def build_extra_install() -> str:
    """The command that installs the build extra: the checkout's editable install in a source
    checkout, else from the package index (a runtime-only node)."""
    return "pip install -e '.[build]'" if checkout_root() is not None else "pip install 'kernelforge[build]'"


def read_toml(path: Path) -> dict:
    """The TOML document at `path` (tomllib, or tomli before Python 3.11); OSError, ValueError."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    return tomllib.loads(Path(path).read_text())


def data_dir() -> Path:
    """The package's generated data: tuning/ (the committed tuning tables, one per measured card).

    Shipped inside the package, so a checkout and an installed wheel find them the same way."""
    return Path(__file__).resolve().parent / "data"


def tuning_dir() -> Path:
    """The committed tuning tables (data_dir()/tuning)."""
    return data_dir() / "tuning"


def gpu_test_dirs() -> list[Path]:
    """What `kernelforge validate` runs with pytest (shipped in the package): the shared GPU
    tests (kernelforge/validation) and each built-in family's (kernelforge/families)."""
    package = Path(__file__).resolve().parent
    return [package / "validation", package / "families"]


def user_cache_dir() -> Path:
    """$XDG_CACHE_HOME/kernelforge, or ~/.cache/kernelforge."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "kernelforge"


def _path(value: str | os.PathLike[str]) -> Path:
    return Path(value).expanduser().resolve()


def resolve_cache_root(cli_value: str | os.PathLike[str] | None = None) -> tuple[Path, str]:
    """(cache root, source) where source is "--cache", "$KERNELFORGE_CACHE_DIR", "checkout" or "user"."""
    if cli_value is not None and str(cli_value) != "":
        return _path(cli_value), "--cache"
    env = os.environ.get(CACHE_ENV, "")
    if env:
        return _path(env), f"${CACHE_ENV}"
    checkout = checkout_root()
    if checkout is not None and (checkout / "cache").is_dir():
        return checkout / "cache", "checkout"
    return user_cache_dir(), "user"


def _tomls(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.toml") if p.is_file())


def resolve_spec_paths(cli_values: list[str | os.PathLike[str]] | None,
                       defaults: Callable[[], list[Path]]) -> list[Path]:
    """Spec files: the CLI's (files, or directories of *.toml), else $KERNELFORGE_SPEC_DIR/*.toml,
    else `defaults()` (every registered op family's spec files, `kernelforge.registry.spec_files`);
    raise ValueError naming what was searched when none is found."""
    if cli_values:
        paths: list[Path] = []
        for value in cli_values:
            path = _path(value)
            if path.is_dir():
                found = _tomls(path)
                if not found:
                    raise ValueError(f"spec directory {path} (from --spec) holds no *.toml files")
                paths.extend(found)
            elif path.is_file():
                paths.append(path)
            elif path.exists():
                raise ValueError(f"spec file {path} (from --spec) is not a regular file or a directory")
            else:
                raise ValueError(f"spec file {path} (from --spec) does not exist")
        return paths
    env = os.environ.get(SPEC_ENV, "")
    if env:
        if not _path(env).is_dir():
            what = "does not exist" if not _path(env).exists() else "is not a directory"
            raise ValueError(f"${SPEC_ENV}={env} {what}: expected a directory of *.toml spec files")
        found = _tomls(_path(env))
        if not found:
            raise ValueError(f"${SPEC_ENV}={env} holds no *.toml spec files")
        return found
    found = [p for p in defaults() if p.is_file()]
    if found:
        return found
    raise ValueError(
        "no spec files found: pass --spec FILE (or a directory), or set "
        f"${SPEC_ENV} to a directory of *.toml files (no registered op family ships a spec file)"
    )


def entry_points(group: str) -> list:
    """`importlib.metadata.entry_points(group=group)`: the same entry points in the same order,
    parsing only the entry_points.txt files that mention the group.

    The standard scan parses every installed distribution's entry points into objects (a cost
    that grows with the installed distributions, large on a full training image); this
    one reads each file and skips those that do not name the group. Distributions are taken
    once per normalized name, the first on the path, as the standard scan does."""
    import importlib.metadata as md

    out = []
    seen: set[str] = set()
    for dist in md.distributions():
        try:
            name = dist._normalized_name  # the standard scan's key (importlib.metadata._unique)
        except AttributeError:  # an importlib.metadata without it: the standard scan
            return list(md.entry_points(group=group))
        if name in seen:
            continue
        seen.add(name)
        text = dist.read_text("entry_points.txt")
        if text and group in text:
            out.extend(ep for ep in dist.entry_points if ep.group == group)
    return out
