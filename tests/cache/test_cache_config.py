"""Cache root and spec path precedence: CLI > environment > checkout > per-user."""
from __future__ import annotations

from pathlib import Path

import pytest

from kernelforge import config


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "checkout"
    (root / "cache").mkdir(parents=True)
    (root / "specs").mkdir()
    for name in ("b.toml", "a.toml"):
        (root / "specs" / name).write_text("")
    (root / "specs" / "notes.md").write_text("")
    monkeypatch.setattr(config, "checkout_root", lambda: root)
    monkeypatch.delenv(config.CACHE_ENV, raising=False)
    monkeypatch.delenv(config.SPEC_ENV, raising=False)
    return root


def test_cache_root_precedence(checkout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert config.resolve_cache_root() == (checkout / "cache", "checkout")
    monkeypatch.setenv(config.CACHE_ENV, str(tmp_path / "env"))
    assert config.resolve_cache_root() == ((tmp_path / "env").resolve(), "$KERNELFORGE_CACHE_DIR")
    assert config.resolve_cache_root(tmp_path / "cli") == ((tmp_path / "cli").resolve(), "--cache")
    assert config.resolve_cache_root(str(tmp_path / "cli"))[1] == "--cache"


def test_cache_root_user_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(config.CACHE_ENV, raising=False)
    monkeypatch.setattr(config, "checkout_root", lambda: None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert config.resolve_cache_root() == (tmp_path / "xdg" / "kernelforge", "user")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert config.resolve_cache_root() == (tmp_path / "home" / ".cache" / "kernelforge", "user")


def test_checkout_without_cache_dir_falls_to_user(checkout: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (checkout / "cache").rmdir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert config.resolve_cache_root()[1] == "user"


def test_real_checkout_detected() -> None:
    root = config.checkout_root()
    assert root is not None and (root / "kernelforge" / "config.py").is_file()


def test_default_specs_and_tuning_ship_in_the_package() -> None:
    # Package files, not checkout files: an installed wheel finds them the same way.
    from kernelforge.registry import builtin_families

    package = Path(config.__file__).resolve().parent
    specs = [p for fam in builtin_families().values() for p in fam.spec_files]
    assert specs and all(p.is_file() and package / "families" in p.parents for p in specs)
    assert sorted(config.tuning_dir().glob("*.json"))


def test_the_release_specs_are_the_families_own(checkout: Path) -> None:
    """specs/ (what `make build` and the release build) names each built-in family's spec.toml."""
    from kernelforge.registry import builtin_families

    repo = Path(config.__file__).resolve().parents[1]
    release = sorted((repo / "specs").glob("*.toml"))
    assert [p.resolve() for p in release] == sorted(p for fam in builtin_families().values() for p in fam.spec_files)
    assert all(p.is_symlink() and not Path(p.readlink()).is_absolute() for p in release)


def test_spec_paths_precedence(checkout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelforge.registry import plugin_spec_files

    # The defaults are what the caller passes (the registry's: built-ins, then installed plugins').
    defaults = [checkout / "specs" / "a.toml", checkout / "specs" / "b.toml"]
    assert config.resolve_spec_paths(None, lambda: defaults) == defaults
    from kernelforge.registry import builtin_families
    from kernelforge.spec.files import resolve_spec_paths

    own = [p for fam in builtin_families().values() for p in fam.spec_files]
    assert resolve_spec_paths(None) == own + [p for p in plugin_spec_files() if p.is_file()]
    env_dir = tmp_path / "envspecs"
    env_dir.mkdir()
    (env_dir / "z.toml").write_text("")
    monkeypatch.setenv(config.SPEC_ENV, str(env_dir))
    assert config.resolve_spec_paths([], lambda: defaults) == [(env_dir / "z.toml").resolve()]
    one = tmp_path / "one.toml"
    one.write_text("")
    assert config.resolve_spec_paths([str(one)], lambda: defaults) == [one.resolve()]
    assert config.resolve_spec_paths([env_dir], lambda: defaults) == [(env_dir / "z.toml").resolve()]


def test_spec_paths_errors(checkout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        config.resolve_spec_paths([str(tmp_path / "missing.toml")], list)
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv(config.SPEC_ENV, str(empty))
    with pytest.raises(ValueError, match="KERNELFORGE_SPEC_DIR"):
        config.resolve_spec_paths(None, list)
    monkeypatch.delenv(config.SPEC_ENV)
    with pytest.raises(ValueError, match="no spec files found"):  # no family ships one
        config.resolve_spec_paths(None, lambda: [tmp_path / "nowhere.toml"])
