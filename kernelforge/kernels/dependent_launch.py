"""Programmatic dependent launch (PDL, sm_90+): back-to-back kernels overlap launch and tail.

Every kernelforge kernel is launched with `use_pdl=PDL` and begins with `enter_dependent_grid()`
before it touches global memory. The wait keeps stream order for any producer (kernelforge's or
not): nothing is read before the previous grid has finished and its writes are visible. The
trigger lets the next grid in the stream be launched once every CTA of this one has started, so
its launch and CTA placement overlap this grid's last wave instead of following it
(docs/performance.md).
"""
import cutlass.cute as cute

PDL = True


@cute.jit
def enter_dependent_grid():
    """Wait for the previous grid in the stream, then allow the next one to launch."""
    cute.arch.griddepcontrol_wait()
    cute.arch.griddepcontrol_launch_dependents()
