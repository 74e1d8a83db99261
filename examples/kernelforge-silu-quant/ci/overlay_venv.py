"""Create a venv layered over the running one, for installing an example op family in CI.

    .venv/bin/python examples/kernelforge-silu-quant/ci/overlay_venv.py build/example-venv

The new venv (no pip of its own) sees every package of the running interpreter's environment
(torch, cutlass, kernelforge, ... through a .pth that adds its site-packages, .pth files
included), while what is installed into it (`build/example-venv/bin/python -m pip install -e
...`) stays invisible to the base environment: kernelforge's own test suite assumes no
third-party op family is installed.
"""
from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
from pathlib import Path


def main() -> None:
    target = Path(sys.argv[1]).resolve()
    venv.EnvBuilder(clear=True, with_pip=False, symlinks=True).create(target)
    base = sysconfig.get_paths()["purelib"]
    purelib = subprocess.run([str(target / "bin" / "python"), "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "_kernelforge_base_env.pth").write_text(f"import site; site.addsitedir({base!r})\n")


if __name__ == "__main__":
    main()
