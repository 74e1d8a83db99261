"""The Python API's argument checks, on the CPU (no GPU, no compiler): every public op called with
CPU tensors of any dtype, rank, size (empty, odd, stride-0 views of 2**40 elements) and layout
(transposed, sliced), bad strings, bad out= tuples, non-finite eps, out-of-range masks. Each call
raises ValueError or TypeError with a message (every op checks its arguments before it checks that
x is on CUDA, see tests/ops/test_quantize_validation.py), or, for the ops that compute on any
device (nvfp4_global_scale, rht_global_scale, group_offsets_valid), returns a tensor."""
from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import kernelforge  # noqa: E402
from tests.corpus._corpus import Hang, corpus_settings, count, known, problem, time_limit  # noqa: E402

TARGET = "api_args"
COMPUTES_ON_CPU = {"nvfp4_global_scale", "rht_global_scale", "group_offsets_valid"}
OPS = ["quantize", "rmsnorm_quantize", "add_rmsnorm_quantize", "quantize_experts", "quantize_grouped",
       "quantize_nvfp4_rht", "nvfp4_global_scale", "rht_global_scale", "group_offsets_valid"]
DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.int8, torch.int32, torch.int64,
          torch.uint8, torch.bool, torch.float8_e4m3fn, torch.complex64]


@st.composite
def tensors(draw, big: bool = True):
    dtype = draw(st.sampled_from(DTYPES[:3] * 3 + DTYPES))  # mostly dtypes the ops take: deeper checks
    kind = draw(st.sampled_from(["plain", "plain", "transposed", "sliced", "scalar"] + (["huge"] if big else [])))
    if kind == "scalar":
        return torch.zeros((), dtype=dtype)
    if kind == "huge":  # 2**40 elements, one in memory: sizes past int32 without allocating them
        return torch.zeros((1, 1), dtype=dtype).expand(2**20, 2**20)
    shape = draw(st.one_of(
        st.lists(st.sampled_from([0, 1, 2, 3, 15, 16, 17, 32, 64, 96, 128, 130]), min_size=1, max_size=4),
        st.tuples(st.sampled_from([1, 16, 128, 129]), st.sampled_from([32, 64, 128, 256])).map(list)))
    t = torch.zeros(shape, dtype=dtype)
    if kind == "transposed" and t.dim() >= 2:
        t = t.transpose(-1, -2)
    elif kind == "sliced" and t.shape[-1] > 1:
        t = t[..., 1:]
    return t


odd = st.one_of(st.none(), st.integers(-3, 3), st.floats(allow_nan=True), st.text(max_size=8), st.just([1, 2]),
                st.just(object()), st.just(b"mxfp8"))
formats = st.one_of(st.sampled_from(["mxfp8", "mxfp4", "nvfp4", "MXFP8", "mxfp6", "", "nvfp4 ", "\u00e9"]), odd)
layouts = st.one_of(st.sampled_from(["linear", "swizzled", "Linear", ""]), odd)
modes = st.one_of(st.sampled_from(["floor", "rceil", "none", "ceil"]), odd)
flags = st.one_of(st.booleans(), st.sampled_from([None, 0, 1, 2, "yes", 1.0]))
outs = st.one_of(st.none(), st.tuples(tensors(False)), st.tuples(tensors(False), tensors(False)),
                 st.tuples(tensors(False), tensors(False), tensors(False)), st.lists(tensors(False), max_size=3),
                 tensors(False), odd)
scales = st.one_of(st.none(), tensors(False), odd)
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2, 2**70), odd)
masks = st.one_of(st.integers(-(2**70), 2**70), st.sampled_from([0, 0xFFFF, 0x10000, -1]), odd)


@st.composite
def calls(draw):
    name = draw(st.sampled_from(OPS))
    big = name not in COMPUTES_ON_CPU  # a 2**40-element input is work, not an argument error, where ops compute
    x = draw(st.one_of(tensors(big), odd) if draw(st.integers(0, 9)) == 0 else tensors(big))
    kw: dict = {}
    pick = lambda k, s: kw.__setitem__(k, draw(s)) if draw(st.booleans()) else None  # noqa: E731
    if name == "quantize":
        args = (x, draw(formats))
        for k, s in (("layout", layouts), ("scale_mode", modes), ("global_scale", scales), ("out", outs),
                     ("rowwise", flags), ("columnwise", flags)):
            pick(k, s)
    elif name in ("rmsnorm_quantize", "add_rmsnorm_quantize"):
        w = draw(tensors(False))
        args = (x, draw(tensors(False)), w, draw(formats)) if name.startswith("add") else (x, w, draw(formats))
        for k, s in (("eps", floats), ("layout", layouts), ("scale_mode", modes), ("global_scale", scales),
                     ("out", outs)):
            pick(k, s)
    elif name == "quantize_experts":
        args = (x, draw(formats))
        for k, s in (("layout", layouts), ("scale_mode", modes), ("global_scale", scales), ("out", outs)):
            pick(k, s)
    elif name == "quantize_grouped":
        args = (x, draw(st.one_of(tensors(False), odd)), draw(formats))
        for k, s in (("scale_mode", modes), ("global_scale", scales), ("out", outs), ("check_offsets", flags)):
            pick(k, s)
    elif name == "quantize_nvfp4_rht":
        args = (x,)
        for k, s in (("global_scale_row", scales), ("global_scale_col", scales), ("sign_mask", masks),
                     ("rowwise", flags), ("columnwise", flags), ("layout", layouts), ("out", outs)):
            pick(k, s)
    elif name == "rht_global_scale":
        args = (x,) + ((draw(masks),) if draw(st.booleans()) else ())
    elif name == "group_offsets_valid":
        args = (x, draw(st.one_of(st.integers(-5, 2**40), odd)))
    else:
        args = (x,)
    return name, args, kw


def _describe(t) -> str:
    if isinstance(t, torch.Tensor):
        return f"tensor({list(t.shape)}, {str(t.dtype).replace('torch.', '')}, stride={t.stride()})"
    if isinstance(t, (tuple, list)):
        inner = ", ".join(_describe(v) for v in t)
        return f"({inner})" if isinstance(t, tuple) else f"[{inner}]"
    return repr(t)


def _known(name: str, exc: Exception) -> str | None:
    """The known open bug behind an exception, if it is one (tests/corpus/_corpus.py KNOWN_BUGS)."""
    if name == "quantize" and isinstance(exc, RuntimeError) and "cannot reshape tensor of 0 elements" in str(exc):
        return "quantize-empty-k"
    if name == "group_offsets_valid" and isinstance(exc, NotImplementedError):
        return "offsets-dtype"
    return None


@corpus_settings(max_examples=400, deadline_s=10)
@given(calls())
def test_cpu_argument_checks(call) -> None:
    name, args, kw = call
    given_ = (f"kernelforge.{name}(" + ", ".join([_describe(a) for a in args]
                                                 + [f"{k}={_describe(v)}" for k, v in kw.items()]) + ")")
    fn = getattr(kernelforge, name)
    t0 = time.monotonic()
    try:
        with time_limit(10):
            result = fn(*args, **kw)
    except Hang as exc:
        raise AssertionError(problem(TARGET, "hang", given_, str(exc))) from None
    except (ValueError, TypeError) as exc:
        message = str(exc)
        assert message and message.split(":")[0], problem(TARGET, "wrong error", given_,
                                                           f"{type(exc).__name__} without a message")
        assert "expected a CUDA tensor" not in message or name not in COMPUTES_ON_CPU, message
        count(TARGET, type(exc).__name__, time.monotonic() - t0)
        return
    except Exception as exc:  # noqa: BLE001
        bug = _known(name, exc)
        if bug:
            known(TARGET, bug, given_, time.monotonic() - t0)
            return
        raise AssertionError(problem(TARGET, "traceback", given_, f"{type(exc).__name__}: {exc}")) from exc
    assert name in COMPUTES_ON_CPU, problem(TARGET, "bad output", given_,
                                            f"a CPU call of {name} returned {type(result).__name__}")
    count(TARGET, "returned", time.monotonic() - t0)
