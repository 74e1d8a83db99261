"""`kernelforge.registry.module_sources`: a family whose kernel is another installed package's code
lists that package's modules among its sources. Their files are found without importing them, and
their bytes count in the family's source hash (so in every cache key); the built-in families' keys
do not change (their sources are their own files, as before)."""
from __future__ import annotations

import sys
import textwrap

import pytest

from kernelforge.registry import module_sources

PACKAGE = {
    "kf_third_party/__init__.py": "raise RuntimeError('imported')  # finding files must not import it\n",
    "kf_third_party/kernel.py": "SCALE = 2\n",
    "kf_third_party/sub/__init__.py": "",
    "kf_third_party/sub/helpers.py": "OFFSET = 1\n",
}


@pytest.fixture
def third_party(tmp_path, monkeypatch):
    for rel, text in PACKAGE.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.split(".")[0] == "kf_third_party"]:
        sys.modules.pop(name)


def test_finds_package_module_and_subpackage_files_without_importing(third_party):
    found = module_sources("kf_third_party", "kf_third_party.kernel", "kf_third_party.sub",
                           "kf_third_party.sub.helpers")
    assert found == tuple((third_party / rel).resolve() for rel in PACKAGE)
    assert "kf_third_party" not in sys.modules


@pytest.mark.parametrize("name, message", [
    ("kf_not_installed_anywhere", "kf_not_installed_anywhere: no installed module 'kf_not_installed_anywhere'"),
    ("kf_third_party.missing", "kf_third_party.missing: no Python source file found for it in 'kf_third_party'"),
    ("kf_third_party.sub.missing.deeper", "no Python source file found"),
])
def test_a_missing_module_is_named(third_party, name, message):
    with pytest.raises(ModuleNotFoundError, match=message):
        module_sources(name)


def test_their_bytes_are_part_of_the_family_source_hash(third_party, monkeypatch):
    import kernelforge.registry as registry
    from kernelforge.sources import source_files, source_hash

    quantize = registry.get_family("quantize")
    before = source_hash("quantize")
    monkeypatch.setattr(registry, "_registered", {})
    fam = quantize._replace(schema=quantize.schema._replace(name="kf_third_party_op"),
                            sources=(*quantize.source_paths(), *module_sources("kf_third_party.kernel")))
    registry.register(fam, distribution="kf-third-party", version="1.0")
    try:
        assert third_party / "kf_third_party" / "kernel.py" in source_files("kf_third_party_op")
        h1 = source_hash("kf_third_party_op")
        (third_party / "kf_third_party" / "kernel.py").write_text("SCALE = 3\n")
        source_hash.cache_clear()
        assert source_hash("kf_third_party_op") != h1  # an edit of the other package rebuilds the op
        assert source_hash("quantize") == before
    finally:
        monkeypatch.setattr(registry, "_registered", {})
        source_hash.cache_clear()
