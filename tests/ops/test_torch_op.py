"""`TorchOp` registration on the CPU: the op that torch.library sees is the one custom_op would
make (schema, tags, fake, autograd, in-place version counting), for an op that mutates nothing
and for one that mutates an argument, both registered with the cheaper Library calls."""
from __future__ import annotations

import pytest
import torch

from kernelforge.ops.torch_op import TorchOp


def _pair(x: torch.Tensor, factor: float = 2.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Two fresh outputs: x * factor and its bytes as float8 (a quantizer-like result)."""
    return x * factor, (x * factor).to(torch.float8_e4m3fn)


def _fake_pair(x, factor=2.0):
    return torch.empty_like(x), torch.empty_like(x, dtype=torch.float8_e4m3fn)


def _bump(x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """x + residual, with the sum also written into residual behind autograd's back (through
    `.data`, whose writes bump no version counter), as a kernel writing through a pointer does."""
    residual.data.add_(x)
    return residual.clone()


PAIR = TorchOp("kf_torch_op_test::pair", _pair, fake=_fake_pair)
REFERENCE = torch.library.custom_op("kf_torch_op_ref::pair", _pair, mutates_args=())  # what custom_op makes
REFERENCE.register_fake(_fake_pair)
BUMP = TorchOp("kf_torch_op_test::bump", _bump, fake=lambda x, residual: torch.empty_like(x),
               mutates_args=("residual",))
REFERENCE_BUMP = torch.library.custom_op("kf_torch_op_ref::bump", _bump, mutates_args=("residual",))
REFERENCE_BUMP.register_fake(lambda x, residual: torch.empty_like(x))


KEYS = ("CompositeExplicitAutograd", "Autograd", "Meta", "CPU", "CUDA", "AutogradCUDA", "ADInplaceOrView",
        "BackendSelect", "Functionalize")


@pytest.mark.parametrize("name", ["pair", "bump"])
def test_schema_tags_and_kernels_match_custom_op(name):
    ours = getattr(torch.ops.kf_torch_op_test, name).default
    ref = getattr(torch.ops.kf_torch_op_ref, name).default
    assert str(ours._schema).replace("kf_torch_op_test", "kf_torch_op_ref") == str(ref._schema)
    assert set(ours.tags) == set(ref.tags) and torch.Tag.pt2_compliant_tag in ours.tags
    for key in KEYS:
        assert (torch._C._dispatch_has_kernel_for_dispatch_key(ours.name(), key)
                == torch._C._dispatch_has_kernel_for_dispatch_key(ref.name(), key)), key
    residual = next(a for a in torch.ops.kf_torch_op_test.bump.default._schema.arguments if a.name == "residual")
    assert residual.alias_info is not None and residual.alias_info.is_write


@pytest.mark.parametrize("op", [torch.ops.kf_torch_op_test.bump, torch.ops.kf_torch_op_ref.bump])
def test_a_mutated_argument_bumps_its_version_and_stale_saved_tensors_are_caught(op):
    x, residual = torch.randn(4, 8), torch.randn(4, 8)
    want = residual + x
    before = residual._version
    out = op(x, residual)
    assert torch.equal(residual, want) and torch.equal(out, want)
    assert residual._version > before, "the dispatcher's call did not bump the mutated tensor's version"
    # The fault the version counter guards: a tensor saved for backward, then written by the op.
    leaf = torch.randn(4, 8, requires_grad=True)
    saved = leaf * 1.0
    loss = (saved * saved).sum()  # saves `saved` for backward
    op(torch.randn(4, 8), saved)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


UTILS = ("test_schema", "test_faketensor", "test_autograd_registration")  # what the GPU suite checks


def test_opcheck_passes_for_both_registrations():
    x = torch.randn(4, 8, requires_grad=True)
    torch.library.opcheck(torch.ops.kf_torch_op_test.pair.default, (x, 3.0), test_utils=UTILS)
    torch.library.opcheck(torch.ops.kf_torch_op_test.bump.default, (torch.randn(4, 8), torch.randn(4, 8)),
                          test_utils=UTILS)


def test_custom_op_results_and_no_backward():
    x = torch.randn(5, 16)
    a, b = torch.ops.kf_torch_op_test.pair(x, 3.0)
    want_a, want_b = _pair(x, 3.0)
    assert torch.equal(a, want_a) and torch.equal(b.view(torch.uint8), want_b.view(torch.uint8))
    xg = torch.randn(5, 16, requires_grad=True)
    for op in (torch.ops.kf_torch_op_test.pair, torch.ops.kf_torch_op_ref.pair):  # ours as custom_op's
        a, _ = op(xg)
        assert a.requires_grad
        with pytest.raises(RuntimeError, match="no autograd formula was registered"):
            a.sum().backward()


def test_eager_call_skips_the_dispatcher_and_compile_traces_the_op():
    x = torch.randn(3, 8)
    assert all(torch.equal(u, v) for u, v in zip(PAIR(x, 1.5), _pair(x, 1.5)))
    graphs = []

    def backend(gm, inputs):
        graphs.append(gm)
        return gm.forward

    got = torch.compile(lambda t: PAIR(t + 1, 2.0)[0] - 1, backend=backend, fullgraph=True)(x)
    assert torch.allclose(got, (x + 1) * 2 - 1)
    targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert any("kf_torch_op_test.pair" in t for t in targets), targets


def _builtin_ops() -> list[TorchOp]:
    """Every TorchOp the built-in op families' public modules define."""
    import importlib

    from kernelforge.registry import builtin_api

    modules = {importlib.import_module(path.partition(":")[0]) for path in builtin_api().values()}
    return [v for m in modules for v in vars(m).values() if isinstance(v, TorchOp)]


def test_builtin_ops_give_their_schema_as_inferred():
    """The built-in ops spell out their schema (no inference at import); each must be exactly
    what torch.library.infer_schema makes of the eager function, so the two cannot drift."""
    ops = _builtin_ops()
    assert len({op.qualname for op in ops}) >= 7
    for op in ops:
        inferred = torch.library.infer_schema(op.eager, mutates_args=op.mutates_args)
        assert op.schema_given, f"{op.qualname}: give schema={inferred!r} (inferring it costs every import)"
        assert op.schema == inferred, f"{op.qualname}: schema {op.schema!r} is not the inferred {inferred!r}"


def test_a_given_schema_that_differs_from_the_signature_is_caught():
    """The check above fails for a schema that drifted from its function (here: a default)."""
    op = TorchOp("kf_torch_op_test::drift", _pair, fake=_fake_pair,
                 schema="(Tensor x, float factor=3.0) -> (Tensor, Tensor)")
    assert op.schema != torch.library.infer_schema(op.eager, mutates_args=op.mutates_args)
