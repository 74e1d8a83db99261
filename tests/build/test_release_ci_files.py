"""The release script and workflow (ci/release): the script always shards, without probing its own
tool's features; the workflow publishes only what a validate job ran for."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RELEASE = REPO / "ci" / "release"


def test_release_script_always_shards():
    script = (RELEASE / "release.sh").read_text()
    assert "set -euo pipefail" in script
    assert "--help" not in script and "grep" not in script, "the script probes its own tool's features"
    assert "unsharded" not in script
    assert re.search(r'\$KF build (-q )?--cache "\$WORK/shard-\$i" --shard "\$i/\$SHARDS"', script)
    assert '$KF cache merge --cache "$WORK/cache"' in script


def _arch_of(wheel_glob: str) -> str:
    m = re.search(r"kernelforge_kernels_([^-*]+)-", wheel_glob)
    return m.group(1) if m else ""


def test_workflow_publishes_only_validated_kernel_wheels():
    yaml = pytest.importorskip("yaml")
    text = (RELEASE / "github-workflow.yml").read_text()
    jobs = yaml.safe_load(text)["jobs"]
    shipped = {a.replace("_", "") for a in yaml.safe_load(text)["env"]["ARCHES"].split()}
    validated = {leg["arch"] for leg in jobs["validate"]["strategy"]["matrix"]["include"]}
    assert validated and validated <= shipped
    validate_text = str(jobs["validate"]["steps"])
    assert "${{ matrix.arch }}" in validate_text and "kernelforge validate" in validate_text
    uploads = [s for s in jobs["validate"]["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert uploads and uploads[-1] is jobs["validate"]["steps"][-1], "upload only after validation passed"
    assert uploads[-1]["with"]["name"] == "validated-${{ matrix.arch }}"
    assert _arch_of(uploads[-1]["with"]["path"]) == "${{ matrix.arch }}"

    publish = jobs["publish"]
    assert publish["needs"] == "validate"
    packages_dir = publish["steps"][-1]["with"]["packages-dir"]
    assert packages_dir != "dist", "publish uploads everything packaged, validated or not"
    into_publish = [s for s in publish["steps"] if packages_dir in str(s.get("with", {}).get("path", ""))
                    or packages_dir in str(s.get("run", ""))]
    downloads = [s["with"] for s in into_publish if "uses" in s]
    assert downloads == [{"pattern": "validated-*", "path": packages_dir, "merge-multiple": True}]
    copies = [s["run"] for s in into_publish if "run" in s]
    assert copies and all("kernelforge-*.whl" in c and "kernels" not in c for c in copies), copies
    # an arch built but not validated is said to be unpublished, with what to add
    for arch in shipped - validated:
        assert re.search(rf"{arch[:5]}.*not published|{arch}.*runner", text, re.I | re.S), arch


def test_readme_and_pyproject_say_what_is_published_and_licensed():
    readme = " ".join((REPO / "README.md").read_text().split())  # wrapping may move line breaks
    assert "falls back to one unsharded build" not in readme
    assert "not published until an SM100 runner" in readme
    assert (REPO / "LICENSE").is_file()
