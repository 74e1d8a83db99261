"""kernelforge's own op families, one folder each (`kernelforge/families/<name>/`): the family's
definition (family.py), CuTe-DSL kernel (kernel.py), builder (build.py), torch op (op.py),
reference (reference.py), default spec (spec.toml) and GPU tests (test_gpu.py). They are
declared under the entry-point group `kernelforge.ops` in kernelforge's pyproject, exactly as
a plugin declares its own, and nothing below this package imports them.

The registry that used to live here is `kernelforge.registry`; its names still resolve from
here for one release, with a DeprecationWarning.
"""
from kernelforge.lazy import moved_exports

__getattr__, __dir__ = moved_exports(__name__, {name: "kernelforge.registry" for name in (
    "ENTRY_POINT_GROUP", "FamilyView", "Heuristic", "OpFamily", "TimingCalls", "builtin_api", "builtin_families",
    "families", "find_family", "get_family", "plugin_families", "plugin_spec_files", "register", "reload_plugins")})
