"""Several devices, on the CPU: every op refuses arguments on another device than its input with
a ValueError naming the argument and both devices, before anything is launched; the out= fast
path's memo is keyed by the device; a launch on another device than the current one is refused
while the current device's stream is being captured into a CUDA graph (see `_common`'s
"Devices" comment for how the launch itself finds its device and stream).

No GPU here: tensors get a fake device through a subclass whose `device` and `get_device()`
report "cuda:N" while the data stays on the CPU, `kernelforge.ops.checks.current_device` and the capture
queries are monkeypatched, and `_common.kernel_for` is replaced by a recorder (a call that gets
that far passed every check; `launch.staging_rule` answers that no card's rule was measured). The real-device counterparts are in
kernelforge/validation/test_multi_gpu.py (run on a machine with 2 GPUs).
"""
from __future__ import annotations

import re

import pytest
import torch

import kernelforge
from kernelforge.ops import checks, fast_path, launch

BF16 = torch.bfloat16
U8 = torch.uint8


class OnDevice(torch.Tensor):
    """A CPU tensor that reports the device `_dev` (what the ops' checks read)."""

    _dev = torch.device("cpu")

    @property
    def device(self):  # type: ignore[override]
        return self._dev

    def get_device(self):  # type: ignore[override]
        return self._dev.index if self._dev.type == "cuda" else -1

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


def on(t: torch.Tensor, dev: str) -> torch.Tensor:
    u = t.as_subclass(OnDevice)
    u._dev = torch.device(dev)
    return u


class Launched(Exception):
    """Raised by the kernel_for stand-in: the call passed every check."""


@pytest.fixture
def no_launch(monkeypatch):
    """kernel_for raises Launched; the current device is cuda:1 (no capture)."""
    def kernel_for(*args, **kwargs):
        raise Launched()
    monkeypatch.setattr(launch, "kernel_for", kernel_for)
    monkeypatch.setattr(launch, "staging_rule", lambda dev: None)  # no card here: the shipped staging rule
    monkeypatch.setattr(checks, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(checks, "stream_capturing", lambda index: False)
    fast_path.fast_calls.clear()
    yield
    fast_path.fast_calls.clear()


def _g(dev: str, n: int = 1) -> torch.Tensor:
    return on(torch.ones(n), dev)


# (op name, arg naming the input, builder(dev of each argument) -> (fn, args, kwargs), the
# argument names that can be moved to another device). Shapes: x [64, 64] bfloat16.
def _quantize(d):
    return kernelforge.quantize, (on(torch.randn(64, 64).to(BF16), d["x"]), "nvfp4"), dict(
        global_scale=_g(d["global_scale"]),
        out=(on(torch.empty(64, 32, dtype=U8), d["out[0] (data)"]), on(torch.empty(64, 4, dtype=U8), d["out[1] (scale)"])))


def _columnwise(d):
    return kernelforge.quantize, (on(torch.randn(64, 64).to(BF16), d["x"]), "nvfp4"), dict(
        global_scale=_g(d["global_scale"]), rowwise=False, columnwise=True,
        out=(on(torch.empty(64, 32, dtype=U8), d["out[0] (data_t)"]), on(torch.empty(64, 4, dtype=U8), d["out[1] (scale_t)"])))


def _dual(d):
    return kernelforge.quantize, (on(torch.randn(64, 64).to(BF16), d["x"]), "mxfp8"), dict(
        rowwise=True, columnwise=True,
        out=(on(torch.empty(64, 64, dtype=U8), d["out[0] (data)"]), on(torch.empty(64, 2, dtype=U8), d["out[1] (scale)"]),
             on(torch.empty(64, 64, dtype=U8), d["out[2] (data_t)"]), on(torch.empty(64, 2, dtype=U8), d["out[3] (scale_t)"])))


def _rht(d):
    return kernelforge.quantize_nvfp4_rht, (on(torch.randn(64, 64).to(BF16), d["x"]),), dict(
        global_scale_row=_g(d["global_scale_row"]), global_scale_col=_g(d["global_scale_col"]), layout="linear",
        out=(on(torch.empty(64, 32, dtype=U8), d["out[0] (data)"]), on(torch.empty(64, 4, dtype=U8), d["out[1] (scale)"]),
             on(torch.empty(64, 32, dtype=U8), d["out[2] (data_t)"]), on(torch.empty(64, 4, dtype=U8), d["out[3] (scale_t)"])))


def _rmsnorm(d):
    return kernelforge.rmsnorm_quantize, (on(torch.randn(64, 64).to(BF16), d["x"]),
                                          on(torch.randn(64).to(BF16), d["weight"]), "nvfp4"), dict(
        global_scale=_g(d["global_scale"]),
        out=(on(torch.empty(64, 32, dtype=U8), d["out[0] (data)"]), on(torch.empty(64, 4, dtype=U8), d["out[1] (scale)"])))


def _add_rmsnorm(d):
    return kernelforge.add_rmsnorm_quantize, (on(torch.randn(64, 64).to(BF16), d["x"]),
                                              on(torch.randn(64, 64).to(BF16), d["residual"]),
                                              on(torch.randn(64).to(BF16), d["weight"]), "nvfp4"), dict(
        global_scale=_g(d["global_scale"]),
        out=(on(torch.empty(64, 32, dtype=U8), d["out[0] (data)"]), on(torch.empty(64, 4, dtype=U8), d["out[1] (scale)"])))


def _experts(d):
    return kernelforge.quantize_experts, (on(torch.randn(2, 64, 64).to(BF16), d["w"]), "nvfp4"), dict(
        global_scale=_g(d["global_scale"], 2), layout="linear",
        out=(on(torch.empty(2, 64, 32, dtype=U8), d["out[0] (data)"]), on(torch.empty(2, 64, 4, dtype=U8), d["out[1] (scale)"])))


def _grouped(d):
    return kernelforge.quantize_grouped, (on(torch.randn(64, 64).to(BF16), d["x"]),
                                          on(torch.tensor([32, 64], dtype=torch.int32), d["group_offsets"]), "nvfp4"), dict(
        global_scale=_g(d["global_scale"], 2),
        out=(on(torch.empty(64, 32, dtype=U8), d["out[0] (data)"]), on(torch.empty(256, 4, dtype=U8), d["out[1] (scale)"]),
             on(torch.empty(2, dtype=torch.int32), d["out[2] (scale_offsets)"])))


CASES = {
    "quantize": ("x", _quantize, ["global_scale", "out[0] (data)", "out[1] (scale)"]),
    "columnwise": ("x", _columnwise, ["global_scale", "out[0] (data_t)", "out[1] (scale_t)"]),
    "dual": ("x", _dual, ["out[0] (data)", "out[1] (scale)", "out[2] (data_t)", "out[3] (scale_t)"]),
    "rht": ("x", _rht, ["global_scale_row", "global_scale_col", "out[0] (data)", "out[1] (scale)",
                        "out[2] (data_t)", "out[3] (scale_t)"]),
    "rmsnorm": ("x", _rmsnorm, ["weight", "global_scale", "out[0] (data)", "out[1] (scale)"]),
    "add_rmsnorm": ("x", _add_rmsnorm, ["residual", "weight", "global_scale", "out[0] (data)", "out[1] (scale)"]),
    "experts": ("w", _experts, ["global_scale", "out[0] (data)", "out[1] (scale)"]),
    "grouped": ("x", _grouped, ["group_offsets", "global_scale", "out[2] (scale_offsets)", "out[0] (data)",
                                "out[1] (scale)"]),
}
MIXED = [(op, name) for op, (_, _, names) in CASES.items() for name in names]


class AllOn(dict):
    """Every argument on `dev` except those given."""

    def __init__(self, dev: str, **others: str):
        super().__init__(others)
        self.dev = dev

    def __missing__(self, key: str) -> str:
        return self.dev


@pytest.mark.parametrize("op", CASES)
@pytest.mark.parametrize("dev", ["cuda:0", "cuda:1"])
def test_all_on_one_device_passes_every_check(no_launch, monkeypatch, op, dev):
    """The baseline of the mixed cases: the same call with every tensor on one device gets to
    the kernel lookup, whether that device is the current one (cuda:1) or not (cuda:0)."""
    _, build, _ = CASES[op]
    fn, args, kwargs = build(AllOn(dev))
    with pytest.raises(Launched):
        fn(*args, **kwargs)


@pytest.mark.parametrize("op,name", MIXED)
@pytest.mark.parametrize("x_dev,other", [("cuda:1", "cuda:0"), ("cuda:0", "cuda:1")])
def test_mixed_devices_name_the_argument_and_both_devices(no_launch, op, name, x_dev, other):
    arg, build, _ = CASES[op]
    fn, args, kwargs = build(AllOn(x_dev, **{name: other}))
    want = f"{name}: expected a tensor on {x_dev} (the device of {arg}), got {other}"
    with pytest.raises(ValueError, match="^" + re.escape(want) + "$"):
        fn(*args, **kwargs)


def test_check_same_device_helper():
    x, y = on(torch.zeros(1), "cuda:1"), on(torch.zeros(1), "cuda:0")
    checks.check_same_device((("a", x), ("b", None)), torch.device("cuda:1"))
    with pytest.raises(ValueError, match=re.escape("b: expected a tensor on cuda:1 (the device of w), got cuda:0")):
        checks.check_same_device((("a", x), ("b", y)), torch.device("cuda:1"), "w")


# ---------------------------------------------------------------- the out= fast path's memo


class Recorder:
    """A kernel function stand-in: counts its calls and the device of its first argument."""

    def __init__(self):
        self.devices: list[int] = []

    def __call__(self, *args):
        self.devices.append(args[0].get_device())


@pytest.fixture
def forbid_checked_path(monkeypatch):
    """A context in which the ops' checked path raises: calls inside it were served by the fast path."""
    from kernelforge.testing.checks import forbidding_checked_path

    return forbidding_checked_path(monkeypatch)


@pytest.fixture
def recorder(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(launch, "kernel_for", lambda *a, **k: rec)
    monkeypatch.setattr(launch, "staging_rule", lambda dev: None)  # no card here: the shipped staging rule
    monkeypatch.setattr(checks, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    fast_path.fast_calls.clear()
    yield rec
    fast_path.fast_calls.clear()


def _q_call(dev: str):
    """A remembered-able NVFP4 quantize call on `dev` (out buffers in the format's dtypes)."""
    x = on(torch.randn(64, 64).to(BF16), dev)
    out = (on(torch.empty(64, 32, dtype=torch.float4_e2m1fn_x2), dev), on(torch.empty(64, 4, dtype=torch.float8_e4m3fn), dev))
    return x, out, _g(dev)


def _rms_call(dev: str):
    x, out, g = _q_call(dev)
    return x, on(torch.randn(64).to(BF16), dev), out, g


def _cw_out(dev: str):
    return (on(torch.empty(64, 32, dtype=torch.float4_e2m1fn_x2), dev), on(torch.empty(64, 4, dtype=torch.float8_e4m3fn), dev))


FAST_OPS = {
    "quantize": (lambda x, w, out, g: kernelforge.quantize(x, "nvfp4", global_scale=g, out=out), _q_call),
    "rmsnorm": (lambda x, w, out, g: kernelforge.rmsnorm_quantize(x, w, "nvfp4", global_scale=g, out=out), _rms_call),
    "columnwise": (lambda x, w, out, g: kernelforge.quantize(x, "nvfp4", global_scale=g, out=out, rowwise=False,
                                                             columnwise=True), None),
}


def _args(op: str, dev: str):
    if op == "quantize":
        x, out, g = _q_call(dev)
        return x, None, out, g
    if op == "rmsnorm":
        return _rms_call(dev)
    x, _, g = _q_call(dev)
    return x, None, _cw_out(dev), g


@pytest.mark.parametrize("op", FAST_OPS)
def test_memo_key_holds_the_device(recorder, op):
    """The same shapes into each device's own buffers: two memo entries, told apart by the
    input's device index, and each repeat served by the fast path on its device."""
    call = FAST_OPS[op][0]
    a0, a1 = _args(op, "cuda:0"), _args(op, "cuda:1")
    call(*a0)
    call(*a1)
    assert len(fast_path.fast_calls) == 2
    assert sorted(k[4] for k in fast_path.fast_calls) == [0, 1]
    call(*a1)
    call(*a0)
    assert recorder.devices == [0, 1, 1, 0]


@pytest.mark.parametrize("op", FAST_OPS)
def test_memo_does_not_serve_another_device(recorder, op):
    """A call remembered on cuda:0, repeated with an input of the same shape on cuda:1 and the
    same (cuda:0) buffers: the memo misses and the checked path names the mismatch."""
    call = FAST_OPS[op][0]
    x0, w0, out0, g0 = _args(op, "cuda:0")
    call(x0, w0, out0, g0)
    assert len(fast_path.fast_calls) == 1
    x1 = on(torch.randn(64, 64).to(BF16), "cuda:1")
    first = "weight" if op == "rmsnorm" else "global_scale"
    with pytest.raises(ValueError, match="^" + re.escape(f"{first}: expected a tensor on cuda:1 (the device of x), got cuda:0")):
        call(x1, w0, out0, g0)
    assert recorder.devices == [0]


@pytest.mark.parametrize("op", FAST_OPS)
def test_fast_path_on_a_non_current_device(recorder, forbid_checked_path, op):
    """Current device cuda:0, tensors on cuda:1, no capture: the fast path launches."""
    call = FAST_OPS[op][0]
    a1 = _args(op, "cuda:1")
    call(*a1)
    with forbid_checked_path():
        call(*a1)
    assert recorder.devices == [1, 1]


# ---------------------------------------------------------------- CUDA graph capture elsewhere


CAPTURE_MSG = re.escape("is on cuda:1, but a CUDA graph is being captured on the current stream of cuda:0")


@pytest.mark.parametrize("op", FAST_OPS)
def test_capture_on_the_current_device_refuses_a_launch_elsewhere(recorder, monkeypatch, op):
    """Remembered on cuda:1; then the current device's (cuda:0's) stream is capturing and
    cuda:1's is not: both the fast path and the checked path refuse, nothing is launched."""
    call = FAST_OPS[op][0]
    a1 = _args(op, "cuda:1")
    call(*a1)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    monkeypatch.setattr(checks, "stream_capturing", lambda index: False)
    with pytest.raises(RuntimeError, match="^x: " + CAPTURE_MSG):
        call(*a1)
    fast_path.fast_calls.clear()
    with pytest.raises(RuntimeError, match="^x: " + CAPTURE_MSG):
        call(*a1)
    assert recorder.devices == [1]


@pytest.mark.parametrize("op", FAST_OPS)
def test_capture_on_the_input_device_records_the_launch(recorder, monkeypatch, op):
    """cuda:1's own current stream is capturing too: the launch (recorded there) goes ahead."""
    call = FAST_OPS[op][0]
    a1 = _args(op, "cuda:1")
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    monkeypatch.setattr(checks, "stream_capturing", lambda index: index == 1)
    call(*a1)
    call(*a1)
    assert recorder.devices == [1, 1]


@pytest.mark.parametrize("op", ["experts", "grouped"])
def test_capture_refusal_of_the_grouped_ops(no_launch, monkeypatch, op):
    """Also quantize_experts and quantize_grouped (before the host read of group_offsets)."""
    monkeypatch.setattr(checks, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    monkeypatch.setattr(checks, "stream_capturing", lambda index: False)
    arg, build, _ = CASES[op]
    fn, args, kwargs = build(AllOn("cuda:1"))
    if op == "grouped":
        args = (args[0], on(torch.tensor([64, 32], dtype=torch.int32), "cuda:1"), *args[2:])  # unread: refused first
    with pytest.raises(RuntimeError, match=f"^{arg}: " + CAPTURE_MSG):
        fn(*args, **kwargs)


def test_grouped_reads_offsets_unless_their_device_captures(no_launch, monkeypatch):
    """With check_offsets=True the offsets' values are checked (a host read) unless the current
    stream of *their* device is capturing, whichever device is current; by default never."""
    monkeypatch.setattr(checks, "current_device", lambda: 0)
    bad = lambda: on(torch.tensor([64, 32], dtype=torch.int32), "cuda:1")  # noqa: E731
    fn, args, kwargs = _grouped(AllOn("cuda:1"))
    monkeypatch.setattr(checks, "stream_capturing", lambda index: False)
    with pytest.raises(Launched):
        fn(args[0], bad(), *args[2:], **kwargs)
    kwargs = {**kwargs, "check_offsets": True}
    with pytest.raises(ValueError, match="^group_offsets: expected non-decreasing"):
        fn(args[0], bad(), *args[2:], **kwargs)
    monkeypatch.setattr(checks, "stream_capturing", lambda index: index == 1)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    with pytest.raises(Launched):
        fn(args[0], bad(), *args[2:], **kwargs)


def test_same_device_costs_one_compare(monkeypatch):
    """check_launch_device on the current device asks nothing about capture."""
    def boom():
        raise AssertionError("capture state queried")
    monkeypatch.setattr(checks, "current_device", lambda: 3)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", boom)
    checks.check_launch_device(torch.device("cuda:3"))
    checks.check_launch_device(torch.device("cpu"))
