"""Release artifacts: per-arch kernel wheels (`kernelforge package`) written deterministically."""
