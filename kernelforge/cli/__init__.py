"""The `kernelforge` command: thin typer sub-apps over the library."""
from __future__ import annotations

import typer

from . import build as _build
from . import cache as _cache
from . import package as _package
from . import specs as _specs
from . import tune as _tune
from . import validate as _validate

app = typer.Typer(help="Ahead-of-time CuTe-DSL kernel builds and a versioned artifact cache.",
                  no_args_is_help=True, add_completion=False)
app.command("build")(_build.build)
app.command("validate")(_validate.validate)
app.command("tune")(_tune.tune)
app.command("package")(_package.package)
app.add_typer(_specs.app, name="specs")
app.add_typer(_cache.app, name="cache")


def main() -> None:
    app()
