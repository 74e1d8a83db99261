"""The built-in families' GPU tests (`<name>/test_gpu.py`) share the GPU tests' hooks and fixtures."""
from kernelforge.testing.pytest_plugin import *  # noqa: F403
