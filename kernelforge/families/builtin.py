"""Moved: each built-in family is defined in its own folder (`kernelforge/families/<name>/family.py`),
the shared schema pieces are in `kernelforge.schema`. The old names resolve for one release,
with a DeprecationWarning."""
from __future__ import annotations

import warnings
from typing import Any

from kernelforge.lazy import moved_exports

_FAMILIES = {"QUANTIZE": "quantize", "RMSNORM_QUANTIZE": "rmsnorm_quantize", "QUANTIZE_GROUPED": "quantize_grouped",
             "QUANTIZE_COLUMNWISE": "quantize_columnwise", "SCALE_LAYOUT": "scale_layout"}
_moved, _dir = moved_exports(__name__, {"HALF_DTYPE": "kernelforge.schema",
                                        "SCALE_MODE_FITS_FORMAT": "kernelforge.schema"})


def schema(name: str, dispatch: tuple[str, ...], tuning: tuple[str, ...], constraints: tuple = (),
           domains: tuple = (), kclass_required: tuple[str, ...] = ()) -> Any:
    """The old schema helper: axes by name, standard ones or those a built-in family defines,
    `domains` replacing them; use `kernelforge.schema.op_schema` with Axis objects instead."""
    warnings.warn("kernelforge.families.builtin.schema moved to kernelforge.schema.op_schema (axes as Axis "
                  "objects); the old helper is removed in the next release", DeprecationWarning, stacklevel=2)
    from kernelforge.registry import builtin_families
    from kernelforge.schema import STANDARD_AXES, op_schema

    known = dict(STANDARD_AXES)
    for fam in builtin_families().values():
        for axis in fam.schema.domains.values():
            known.setdefault(axis.name, axis)
    known.update({d.name: d for d in domains})
    return op_schema(name, tuple(known.get(a, a) for a in dispatch), tuple(known.get(a, a) for a in tuning),
                     tuple(constraints), kclass_required)


def __getattr__(name: str) -> Any:
    if name in _FAMILIES:
        warnings.warn(f"kernelforge.families.builtin.{name} moved to kernelforge.families.{_FAMILIES[name]}."
                      "family.FAMILY; the old name is removed in the next release", DeprecationWarning, stacklevel=2)
        import importlib

        return importlib.import_module(f"kernelforge.families.{_FAMILIES[name]}.family").FAMILY
    return _moved(name)


def __dir__() -> list[str]:
    return sorted([*_dir(), *_FAMILIES, "schema"])
