"""Moved: the ops' shared plumbing is split by job into `kernelforge.ops.checks` (argument
checks, shapes, buffers, fakes), `kernelforge.ops.fast_path` (the out= memo) and
`kernelforge.ops.launch` (dispatch table, kernel lookup); a family imports them through
`kernelforge.extend`. The old names resolve from here for one release, with a DeprecationWarning."""
from kernelforge.lazy import moved_exports

from . import checks, fast_path, launch

__getattr__, __dir__ = moved_exports(__name__, {
    name: module.__name__
    for module in (checks, fast_path, launch)
    for name in vars(module) if not name.startswith("__") and not isinstance(vars(module)[name], type(checks))
})
