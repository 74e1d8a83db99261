"""The kernelforge distribution's metadata: one version source (kernelforge/__init__.py) and the
license the wheel carries (what the release workflow publishes)."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

import kernelforge

REPO = Path(__file__).resolve().parents[2]


def test_pyproject_takes_the_version_from_the_package():
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = data["project"]
    assert "version" not in project, "a second version source beside kernelforge.__version__"
    assert "version" in project.get("dynamic", [])
    assert data["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "kernelforge.__version__"}
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "kernelforge authors" in text


def test_import_kernelforge_reads_no_distribution_metadata():
    out = subprocess.run([sys.executable, "-c", "import sys, kernelforge; print(kernelforge.__version__); "
                          "print(sorted(m for m in sys.modules if m.startswith(('importlib.metadata', 'torch'))))"],
                         capture_output=True, text=True, check=True, cwd=REPO).stdout.splitlines()
    assert out == [kernelforge.__version__, "[]"], out


def test_built_wheel_has_the_package_version_and_the_license(tmp_path):
    """`pip wheel --no-deps` of a copy of the project whose __version__ was changed: the wheel's
    version follows it (it did not while pyproject declared its own), and it carries LICENSE."""
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode != 0:
        pytest.skip("pip is not installed in this environment")
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(REPO / "kernelforge", src / "kernelforge", ignore=ignore)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, src / name)
    init = src / "kernelforge" / "__init__.py"
    version = kernelforge.__version__ + ".post7"
    text = init.read_text()
    assert text.count(f'__version__ = "{kernelforge.__version__}"') == 1
    init.write_text(text.replace(f'__version__ = "{kernelforge.__version__}"', f'__version__ = "{version}"'))
    # --no-build-isolation: the installed setuptools, nothing downloaded
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = (tmp_path / "dist").glob("kernelforge-*.whl")
    assert wheel.name.startswith(f"kernelforge-{version}-"), wheel.name
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(f"kernelforge-{version}.dist-info/METADATA").decode()
        license_text = z.read(f"kernelforge-{version}.dist-info/licenses/LICENSE").decode()
    assert f"\nVersion: {version}\n" in meta
    assert "\nLicense-Expression: Apache-2.0\n" in meta and "\nLicense-File: LICENSE\n" in meta, meta[:800]
    assert license_text == (REPO / "LICENSE").read_text()
