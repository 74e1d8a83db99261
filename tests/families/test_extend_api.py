"""The torch side of the public op-family API (`kernelforge.extend`), on CPU."""
from __future__ import annotations

import pytest
import torch

from kernelforge import extend
from kernelforge.registry import get_family


def test_dispatch_axes_leave_kclass_and_arch_to_the_runtime():
    assert extend.dispatch_axes(get_family("quantize")) == ("format", "scale_mode", "layout", "dtype")


@pytest.mark.parametrize("coords, message", [
    ({"format": "mxfp8", "scale_mode": "floor", "layout": "linear"}, r"missing \['dtype'\]"),
    ({"format": "mxfp8", "scale_mode": "floor", "layout": "linear", "dtype": "bfloat16", "tile": "8"},
     r"unknown \['tile'\]"),
])
def test_kernel_for_names_missing_and_unknown_coordinates(coords, message):
    with pytest.raises(ValueError, match=r"^coords: quantize dispatches on .*" + message):
        extend.kernel_for("quantize", torch.zeros(4, 32), **coords)


def test_kernel_for_refuses_unknown_ops_and_host_tensors():
    with pytest.raises(ValueError, match=r"^op: no op family named 'no_such_op'"):
        extend.kernel_for("no_such_op", torch.zeros(4, 32))
    coords = {"format": "mxfp8", "scale_mode": "floor", "layout": "linear", "dtype": "bfloat16"}
    with pytest.raises(ValueError, match=r"^x: expected a CUDA tensor, got a tensor on cpu"):
        extend.kernel_for("quantize", torch.zeros(4, 32, dtype=torch.bfloat16), **coords)
    with pytest.raises(TypeError, match=r"^x: expected a torch.Tensor, got list"):
        extend.kernel_for("quantize", [1.0], **coords)


def _scaled(x: torch.Tensor, factor: float = 2.0) -> torch.Tensor:
    """A toy eager function (a real family's would launch its kernel)."""
    return x * factor


calls: list[str] = []


def _eager(x: torch.Tensor, factor: float = 2.0) -> torch.Tensor:
    calls.append("eager")
    return _scaled(x, factor)


TOY = extend.TorchOp("kf_extend_test::scaled", _eager, fake=lambda x, factor=2.0: torch.empty_like(x))


def test_torch_op_runs_eager_directly_and_registers_the_custom_op():
    calls.clear()
    x = torch.randn(3, 5)
    torch.testing.assert_close(TOY(x, 3.0), x * 3.0, rtol=0, atol=0)
    assert calls == ["eager"]
    assert torch.ops.kf_extend_test.scaled.default._schema.name == "kf_extend_test::scaled"
    torch.testing.assert_close(torch.ops.kf_extend_test.scaled(x, 0.5), x * 0.5, rtol=0, atol=0)


def test_torch_op_is_traced_as_its_custom_op_under_compile():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
        return gm.forward

    torch._dynamo.reset()
    f = torch.compile(lambda x: TOY(x + 1, 4.0), backend=backend, fullgraph=True)
    x = torch.randn(8)
    torch.testing.assert_close(f(x), (x + 1) * 4.0, rtol=0, atol=0)
    assert any(t.startswith("kf_extend_test.scaled") for t in graphs[0]), graphs


def test_torch_op_rejects_a_bad_qualname():
    with pytest.raises(ValueError, match=r"^qualname: expected 'namespace::name'"):
        extend.TorchOp("no_namespace", _eager, fake=lambda x, factor=2.0: torch.empty_like(x))


def test_register_declares_a_family_from_code(monkeypatch):
    """A package used from PYTHONPATH (no entry point) registers its family from code; the
    distribution name and version enter its cache keys as for an installed plugin."""
    import kernelforge.registry as families
    from kernelforge.sources import source_hash

    QUANTIZE = families.get_family("quantize")
    monkeypatch.setattr(families, "_registered", {})
    fam = QUANTIZE._replace(schema=QUANTIZE.schema._replace(name="kf_registered_quantize"))
    with pytest.raises(ValueError, match=r"^distribution: op family 'kf_registered_quantize' needs"):
        families.register(fam)
    got = families.register(fam, distribution="kf-registered", version="1.2")
    assert families.get_family("kf_registered_quantize") is got
    assert (got.distribution, got.version) == ("kf-registered", "1.2")
    assert families.register(fam, distribution="kf-registered", version="1.2") is got  # idempotent
    h12 = source_hash("kf_registered_quantize")
    with pytest.raises(ValueError, match=r"^family: an op named 'kf_registered_quantize' is already defined"):
        families.register(fam, distribution="kf-registered", version="1.3")
    with pytest.raises(ValueError, match=r"^family: an op named 'quantize' is already defined"):
        families.register(QUANTIZE, distribution="kf-clash")
    monkeypatch.setattr(families, "_registered", {})
    source_hash.cache_clear()
    families.register(fam, distribution="kf-registered", version="1.3")
    assert source_hash("kf_registered_quantize") != h12  # the version is part of the key
    source_hash.cache_clear()
