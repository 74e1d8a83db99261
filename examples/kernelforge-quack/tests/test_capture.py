"""`kf_quack.capture.compiled_by`: what a quack compile function compiles, recorded without compiling,
without quack's caches, and refused where quack asks for a compile option kernelforge does not pass."""
from __future__ import annotations

import importlib

import pytest

cute = pytest.importorskip("cutlass.cute", reason="CuTe-DSL (cutlass) is not importable here")


@pytest.fixture(scope="module")
def softmax():
    try:
        return importlib.import_module("quack.softmax")
    except ImportError as exc:
        pytest.skip(f"quack-kernels is not importable here: {exc}")


def test_records_quacks_kernel_object_and_fakes_without_its_caches(softmax, tmp_path, monkeypatch):
    import cutlass
    import quack.cache
    from kf_quack.capture import compiled_by

    monkeypatch.setattr(quack.cache, "CACHE_DIR", str(tmp_path))
    before = softmax.Softmax.compile.cache_info()
    call = compiled_by(softmax.Softmax.compile, cutlass.BFloat16, cutlass.BFloat16, 4096)
    assert isinstance(call.kernel, softmax.Softmax) and call.kernel.N == 4096
    assert len(call.args) == 3 and call.options == "--enable-tvm-ffi"  # x, out, the environment stream
    assert softmax.Softmax.compile.cache_info() == before and not any(tmp_path.iterdir())


def _compiles_twice():
    cute.compile(object(), options="--enable-tvm-ffi")
    cute.compile(object(), options="--enable-tvm-ffi")


def _compiles_at_opt_level_2():
    cute.compile(object(), options="--enable-tvm-ffi --opt-level 2")


@pytest.mark.parametrize("fn, message", [
    (_compiles_twice, "called cute.compile 2 times, expected once"),
    (_compiles_at_opt_level_2, "does not pass: [('--opt-level', '2')]"),
])
def test_refuses_what_would_not_be_quacks_code(fn, message):
    from kf_quack.capture import compiled_by

    with pytest.raises(RuntimeError) as info:
        compiled_by(fn)
    assert message in str(info.value)
