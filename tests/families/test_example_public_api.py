"""The example op families (examples/kernelforge-silu-quant, examples/kernelforge-quack) import only
kernelforge's public modules for family authors: each one's package, tests, benchmarks and CI
scripts, including imports inside functions, `importlib.import_module("kernelforge...")` and
Python scripts embedded in strings (the subprocess scripts of its tests). A submodule of a public
package is not public: a family imports `kernelforge.testing`, never `kernelforge.testing.references`."""
from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "kernelforge-silu-quant"
QUACK = REPO / "examples" / "kernelforge-quack"
KERNELFORGE = REPO / "kernelforge"

PUBLIC = frozenset({
    "kernelforge",
    "kernelforge.registry",   # OpFamily, register, find_family, ENTRY_POINT_GROUP
    "kernelforge.schema",     # Axis, Constraint, OpSchema, the standard axes, op_schema
    "kernelforge.formats",
    "kernelforge.errors",
    "kernelforge.kernels",    # CuTe-DSL helpers and the builder fakes
    "kernelforge.extend",     # the torch side
    "kernelforge.testing",    # references, poison, rotating inputs, checks
    "kernelforge.spec",       # load_specs, select, OP_SCHEMAS, ...
    "kernelforge.cache",      # CacheStore, ...
    "kernelforge.build",      # the package facade only
    "kernelforge.sources",    # source_hash
})

# An import statement in source that does not parse on its own (a fragment of an f-string, ...).
IMPORT_LINE = re.compile(r"^[ \t]*(?:from[ \t]+(kernelforge(?:\.\w+)*)[ \t]+import\b[ \t(]*([\w \t,]*)"
                         r"|import[ \t]+([\w.]+(?:[ \t]+as[ \t]+\w+)?(?:[ \t]*,[ \t]*[\w.]+(?:[ \t]+as[ \t]+\w+)?)*))",
                         re.M)


def is_module(name: str) -> bool:
    """Whether `name` (kernelforge or below) is a module or package of this checkout's kernelforge."""
    path = KERNELFORGE.joinpath(*name.split(".")[1:])
    return name == "kernelforge" or path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def ours(name: str) -> bool:
    return name == "kernelforge" or name.startswith("kernelforge.")


def module_file(name: str) -> Path:
    path = KERNELFORGE.joinpath(*name.split(".")[1:])
    return path / "__init__.py" if (path / "__init__.py").is_file() else path.with_suffix(".py")


@functools.lru_cache(maxsize=None)
def exported(module: str) -> frozenset[str]:
    """The `__all__` of a public module, read from its source without importing it (a list or tuple
    of names, or `sorted(NAMES)` of a dict or list literal assigned to NAMES)."""
    if module not in PUBLIC:
        return frozenset()
    tree = ast.parse(module_file(module).read_text())
    literals = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Name)}
    value = literals.get("__all__")
    if isinstance(value, ast.Call) and value.args and isinstance(value.args[0], ast.Name):
        value = literals.get(value.args[0].id)  # sorted(_NAMES), list(_EXPORTS)
    items = value.keys if isinstance(value, ast.Dict) else getattr(value, "elts", [])
    return frozenset(e.value for e in items if isinstance(e, ast.Constant) and isinstance(e.value, str))


def from_import(module: str, names: list[str]) -> Iterator[str]:
    """The modules `from module import names` imports: `module`, and each name that is a submodule,
    unless the (public) module exports that name in its `__all__` (`from kernelforge.kernels import
    convert`: a public name of a public package)."""
    yield module
    for n in names:
        if n != "*" and is_module(f"{module}.{n}") and n not in exported(module):
            yield f"{module}.{n}"


def string_imports(text: str) -> Iterator[tuple[int, str]]:
    """(line within `text`, module) for every kernelforge import of Python source held in a string."""
    if "kernelforge" not in text:
        return
    try:
        tree = ast.parse(text)
    except SyntaxError:
        for m in IMPORT_LINE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            if m.group(1):
                names = [n.split()[0] for n in m.group(2).split(",") if n.strip()]
                for module in from_import(m.group(1), names):
                    yield line, module
            else:
                for part in m.group(3).split(","):
                    if ours(part.split()[0]):
                        yield line, part.split()[0]
        return
    yield from tree_imports(tree)


def tree_imports(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, module) for every kernelforge import in `tree`, at any depth, and in its string constants."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if ours(alias.name):
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module and ours(node.module):
                for module in from_import(node.module, [a.name for a in node.names]):
                    yield node.lineno, module
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            arg = node.args[0].value
            if name in ("import_module", "__import__") and isinstance(arg, str) and ours(arg):
                yield node.lineno, arg
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for line, module in string_imports(node.value):
                yield node.lineno + line - 1, module


def example_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py")
                  if p.relative_to(root).parts[0] != "build"
                  and not any(part.endswith(".egg-info") or part == "__pycache__" for part in p.relative_to(root).parts))


def imports_of(root: Path) -> list[tuple[str, int, str]]:
    """(file relative to root, line, module) for every kernelforge import under `root`."""
    found = []
    for path in example_files(root):
        for line, module in tree_imports(ast.parse(path.read_text(), filename=str(path))):
            found.append((path.relative_to(root).as_posix(), line, module))
    return sorted(set(found))


def offenders(found: list[tuple[str, int, str]]) -> list[str]:
    return [f"{path}:{line}: {module}" for path, line, module in found if module not in PUBLIC]


@pytest.mark.parametrize("root, read", [
    (EXAMPLE, {"kf_silu_quant/family.py", "kf_silu_quant/ops.py", "tests/test_build.py"}),
    (QUACK, {"kf_quack/family.py", "kf_quack/build.py", "kf_quack/capture.py", "kf_quack/ops/common.py",
             "tests/test_build.py"}),
], ids=["silu-quant", "quack"])
def test_the_examples_import_only_public_modules(root, read):
    found = imports_of(root)
    files = {path for path, _, _ in found}
    # Not vacuous: the package and the tests that use kernelforge were read.
    assert read <= files, sorted(files)
    bad = offenders(found)
    assert not bad, ("the example imports private kernelforge modules (public: " + ", ".join(sorted(PUBLIC))
                     + "):\n" + "\n".join(bad))


PLANTED = '''
import json
import kernelforge.ops.reference
from kernelforge import extend, ops
from kernelforge.testing import references, quantize_ref
from kernelforge.spec import load_specs


def f():
    from kernelforge.build.keys import variant_key
    importlib.import_module("kernelforge.runtime.dispatch")


SCRIPT = r"""
import json, sys
from kernelforge.ops import _common as c
"""
FRAGMENT = f"""
from kernelforge.families import {{name}}
"""
GROUP = "kernelforge.ops"  # an entry-point group named in a string: not an import
'''


def test_the_check_finds_every_kind_of_private_import(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(PLANTED)
    (tmp_path / "build" / "lib").mkdir(parents=True)  # setuptools' copy: not read
    (tmp_path / "build" / "lib" / "mod.py").write_text("import kernelforge.ops\n")
    assert offenders(imports_of(tmp_path)) == [
        "pkg/mod.py:3: kernelforge.ops.reference",
        "pkg/mod.py:4: kernelforge.ops",  # a private submodule imported from the root
        "pkg/mod.py:5: kernelforge.testing.references",  # a submodule of a public package
        "pkg/mod.py:10: kernelforge.build.keys",  # inside a function
        "pkg/mod.py:11: kernelforge.runtime.dispatch",
        "pkg/mod.py:16: kernelforge.ops",  # a subprocess script
        "pkg/mod.py:16: kernelforge.ops._common",
        "pkg/mod.py:19: kernelforge.families",  # a fragment of source (regex)
    ]
