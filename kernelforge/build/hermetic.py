"""The compile workers' environment: nothing outside the cache key may shape an artifact.

CuTe-DSL reads several `CUTE_DSL_*` variables that change the generated code but are not part
of a variant's key. Measured: `CUTE_DSL_LINEINFO=1` changes the object of
quantize.mxfp8.floor.linear.bfloat16.any.sm_90a.t128u1 (sha256 cd80c75b... -> 1a5f5c19...) and
embeds the absolute path of kernelforge/kernels/, so two builders would publish different
bytes under one key. Workers therefore drop every `CUTE_DSL_*` / `CUTE_EXPERIMENTAL_DSL_*`
variable except the ones the DSL itself marks as not affecting compilation (logging, dumps,
its JIT cache); compile options come from toolchain.COMPILE_OPTIONS only.
"""
from __future__ import annotations

import os
from typing import Mapping, MutableMapping

PREFIXES = ("CUTE_DSL_", "CUTE_EXPERIMENTAL_DSL_")
# `affects_compile=False` in the DSL's EnvironmentVarManager spec (4.8.1), plus the deprecated
# KEEP_* spellings it folds into KEEP.
HARMLESS = frozenset({
    "JIT_TIME_PROFILING", "LOG_TO_CONSOLE", "LOG_TO_FILE", "LOG_LEVEL", "PRINT_AFTER_PREPROCESSOR",
    "PRINT_IR", "SHOW_STACKTRACE", "FILTER_STACKTRACE", "NO_CACHE", "JIT_CACHE_MAX_ELEMS",
    "DISABLE_FILE_CACHING", "DUMP_DIR", "CACHE_DIR", "KEEP", "KEEP_IR", "KEEP_PTX", "KEEP_CUBIN",
    "KEEP_SASS", "WARNINGS_IGNORE", "ENABLE_OPTIMIZATION_WARNINGS",
})


def ignored_compile_env(environ: Mapping[str, str] | None = None) -> list[str]:
    """Names of the set variables the compile workers drop (sorted)."""
    env = os.environ if environ is None else environ
    out = []
    for name in env:
        prefix = next((p for p in PREFIXES if name.startswith(p)), None)
        if prefix is not None and name[len(prefix):] not in HARMLESS:
            out.append(name)
    return sorted(out)


def pin_compile_env(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Remove the variables of `ignored_compile_env` from the environment; return their names."""
    env = os.environ if environ is None else environ
    names = ignored_compile_env(env)
    for name in names:
        del env[name]
    return names
