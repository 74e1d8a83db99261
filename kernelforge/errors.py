"""Exceptions a user can cause, each naming what was wrong and how to fix it."""
from __future__ import annotations


class KernelforgeError(Exception):
    """Base class of kernelforge's own errors."""


class SpecError(KernelforgeError, ValueError):
    """A spec file is invalid; the message names the file, the table/key and the value."""


class BuildError(KernelforgeError):
    """A variant failed to compile or link."""


class CacheError(KernelforgeError):
    """The cache is unusable (corrupt artifact, unreadable index, ...)."""


class CorruptArtifact(CacheError):
    """An artifact's bytes do not match the sha256 recorded when it was built."""


class UntrustedCache(CacheError):
    """A cache path fails the ownership policy or is a symlink; the message names the path and the fix."""


class CacheNotWritable(CacheError):
    """A build or repair needs to write a cache root it may not write (read-only, another user's)."""


class KernelNotBuilt(KernelforgeError, LookupError):
    """No cached artifact for a variant on this device; the message holds the build command."""


class UnsupportedShape(KernelforgeError, ValueError):
    """Kernels exist for the arguments, but no cached K-class accepts this K (e.g. H too large)."""
