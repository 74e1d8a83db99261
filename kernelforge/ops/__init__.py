"""The public torch-facing ops, also reachable as `torch.ops.kernelforge.*`.

The `torch.library` custom ops (kernelforge/ops/library.py) are registered on first use, not
here: registering them costs tens of milliseconds that an eager caller never needs. They are
registered by the first attribute access on `torch.ops.kernelforge` (this module installs that
namespace, see `_OpsNamespace`) or by the first call of a Python op that torch.compile traces
(the ops import `.library` on their `torch.compiler.is_compiling()` path), whichever comes first.
"""
import torch

from ._common import set_cache_root
from .quantize import nvfp4_global_scale, quantize
from .quantize_grouped import quantize_experts, quantize_grouped
from .quantize_columnwise import quantize_nvfp4_rht, rht_global_scale
from .rmsnorm_quantize import add_rmsnorm_quantize, rmsnorm_quantize

__all__ = ["add_rmsnorm_quantize", "nvfp4_global_scale", "quantize", "rmsnorm_quantize", "set_cache_root",
           "quantize_nvfp4_rht", "rht_global_scale", "quantize_experts", "quantize_grouped"]

_NS = "kernelforge"


class _OpsNamespace(torch._ops._OpNamespace):
    """`torch.ops.kernelforge`: registers the custom ops before its first op lookup.

    torch's namespace resolves `torch.ops.kernelforge.NAME` in `__getattr__`, which runs only
    for a name not bound yet; this one imports kernelforge/ops/library.py first (once: a module
    imports once; a lookup from inside that import finds it in sys.modules and goes on)."""

    def __getattr__(self, op_name: str):
        if not op_name.startswith("__"):
            import importlib

            importlib.import_module(f"{__name__}.library")
        return super().__getattr__(op_name)


def _install_namespace() -> None:
    if _NS in torch.ops.__dict__:  # made before kernelforge was imported: register now
        import importlib

        importlib.import_module(f"{__name__}.library")
        return
    ns = _OpsNamespace(_NS)
    setattr(torch.ops, _NS, ns)
    names = getattr(torch.ops, "_dir", None)  # what iter(torch.ops) lists, as torch's own __getattr__ does
    if isinstance(names, list) and _NS not in names:
        names.append(_NS)


_install_namespace()
