"""Columnwise and dual quantization and NVFP4 with the random Hadamard transform, on the GPU.

Columnwise output must equal rowwise quantization of x.T.contiguous() byte for byte; the dual
kernel's rowwise output must equal plain rowwise quantization. Inputs are fresh random draws,
caller buffers are poisoned, padding bytes are compared too. Shapes sit on both sides of the
fused ("tile") variant's eligibility: M % 64, K % (4 blocks) and 16-byte alignment.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

import kernelforge
from kernelforge.families.quantize_columnwise.op import hadamard_columns
from kernelforge.families.quantize_columnwise.reference import rht_ref
from kernelforge.families.scale_layout import op as scale_layout
from kernelforge.families.scale_layout import staging
from kernelforge.formats import FORMATS
from kernelforge.ops import checks, launch
from kernelforge.testing.checks import assert_matches, op_kwargs, random_input
from kernelforge.testing.references import quantize_ref
from kernelforge.validation.fused_checks import Tally, compare_fused

pytestmark = pytest.mark.gpu

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
COMBOS = [(f, m) for f in FORMATS for m in FORMATS[f].scale_modes]


def _g(fmt: str):
    return kernelforge.nvfp4_global_scale(torch.randn(64, device="cuda") * 3) if FORMATS[fmt].has_global_scale else None


def _shapes(b: int):
    """(M, K): whole tiles; M off the 64-row tile; K off the 4-block tile; both; small; large."""
    return [(64, 4 * b), (128, 8 * b), (b, 4 * b), (64 + b, 4 * b), (128, 5 * b), (3 * b, 3 * b),
            (192, 7 * b), (128, 128), (4096, 4096)]


def _check_dual(x: torch.Tensor, fmt: str, mode: str, layout: str, g, rowwise: bool, out=None, what=""):
    res = kernelforge.quantize(x, fmt, rowwise=rowwise, columnwise=True, out=out, **op_kwargs(mode, layout, g))
    torch.cuda.synchronize()
    assert len(res) == (4 if rowwise else 2)
    x2 = x.reshape(-1, x.shape[-1])
    if rowwise:
        assert_matches(res[0], res[1], x2, fmt, mode, layout, g, f"{what} rowwise")
    assert_matches(res[-2], res[-1], x2.t().contiguous(), fmt, mode, layout, g, f"{what} columnwise")
    return res


@pytest.mark.parametrize("rowwise", [False, True], ids=["columnwise", "dual"])
@pytest.mark.parametrize("layout", ["linear", "swizzled"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("fmt,mode", COMBOS)
def test_every_variant_against_reference(fmt, mode, dtype, layout, rowwise):
    b = FORMATS[fmt].block
    g = _g(fmt)
    for m, k in _shapes(b):
        x = random_input(m, k, DTYPES[dtype])
        _check_dual(x, fmt, mode, layout, g, rowwise, what=f"{m}x{k}")


@pytest.mark.parametrize("fmt,mode", COMBOS)
def test_eligibility_boundaries_pick_tile_or_edge(fmt, mode):
    """Both classes are used where expected, and both give the reference bytes."""
    b = FORMATS[fmt].block
    table = launch.dispatch_table()
    cap = torch.cuda.get_device_capability()
    coords = {"format": fmt, "scale_mode": mode, "layout": "swizzled", "dtype": "bfloat16",
              "outputs": "dual", "transform": "none"}
    for m, k, want in ((64, 4 * b, "tile"), (128, 8 * b, "tile"), (64 - b, 4 * b, "edge"), (64 + b, 4 * b, "edge"),
                       (64, 3 * b, "edge"), (64, 5 * b, "edge"), (128, 6 * b, "edge")):
        _, cand = table.resolve("quantize_columnwise", coords, cap, k, b, 256, k * 2, m)
        assert cand.kclass.name == want, (m, k)
        _check_dual(random_input(m, k, torch.bfloat16), fmt, mode, "swizzled", _g(fmt), True, what=f"{m}x{k}")
    # A row-strided view (16-byte aligned rows) and a misaligned one.
    base = random_input(129, 8 * b + 8, torch.bfloat16)
    for x in (base[:128, : 8 * b], base[:128, 8: 8 * b + 8]):
        _check_dual(x, fmt, mode, "swizzled", _g(fmt), True, what="view")


@pytest.mark.parametrize("fmt,mode", COMBOS)
def test_columnwise_only_allows_any_k(fmt, mode):
    """Columnwise quantization blocks along M: K need not be a multiple of B."""
    b = FORMATS[fmt].block
    for k in (1, 7, b + 3, 130):
        _check_dual(random_input(2 * b, k, torch.bfloat16), fmt, mode, "swizzled", _g(fmt), False, what=f"K={k}")
    with pytest.raises(ValueError, match="K = 7"):
        kernelforge.quantize(random_input(2 * b, 7, torch.bfloat16), fmt, columnwise=True, **op_kwargs(mode, "linear"))


@pytest.mark.parametrize("fmt,mode", COMBOS)
def test_special_values_and_poisoned_outputs(fmt, mode, poison):
    f = FORMATS[fmt]
    b = f.block
    m, k = 128, 8 * b
    x = random_input(m, k, torch.float32)
    x[:b, 0] = 0.0
    x[3, 5] = float("nan")
    x[b + 1, 2 * b] = float("inf")
    x[70, :] = 1e-42
    x[:, 7] = torch.tensor([0.25, 0.75, 2.5, 5.0, -0.25, -1e-9, 448.0, -0.0] * (m // 8), device="cuda")
    d_dt, s_dt = getattr(torch, f.data_dtype), getattr(torch, f.scale_dtype)
    for dtype in DTYPES.values():
        xd = x.to(dtype)
        out = (poison(torch.empty(m, k * f.element_bits // 8, dtype=torch.uint8, device="cuda")),
               poison(torch.empty(128, 8, dtype=torch.uint8, device="cuda")).view(s_dt),
               poison(torch.empty(k, m * f.element_bits // 8, dtype=d_dt, device="cuda")),
               poison(torch.empty(-(-k // 128) * 128, max(4, m // b), dtype=s_dt, device="cuda")))
        res = _check_dual(xd, fmt, mode, "swizzled", _g(fmt), True, out=out, what=str(dtype))
        assert all(r is o for r, o in zip(res, out))
        if f.has_global_scale:
            # Underflowing (subnormal) and saturating block scales: elements past 6 after
            # scaling, the kernels' clamping path rather than the common one.
            for gv in (1e-6, 3e30):
                g = torch.tensor([gv], device="cuda")
                for layout in ("linear", "swizzled"):
                    _check_dual(xd, fmt, mode, layout, g, True, what=f"{dtype} g={gv}")


GUARD = 4096  # bytes after each output buffer that no kernel may touch


def _guarded(shape: tuple, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """An output buffer of `shape` followed, in the same allocation, by GUARD poisoned bytes."""
    n = torch.Size(shape).numel() * torch.empty(0, dtype=dtype).element_size()
    raw = torch.full((n + GUARD,), 0xA5, dtype=torch.uint8, device="cuda")
    return raw[:n].view(dtype).view(shape), raw[n:]


@pytest.mark.parametrize("layout", ["linear", "swizzled"])
@pytest.mark.parametrize("fmt,transform", [(f, "none") for f in FORMATS] + [("nvfp4", "rht")])
def test_no_write_past_any_output(fmt, transform, layout):
    """Every byte after every output buffer stays untouched, for shapes whose tiles include
    swizzle padding tiles (M <= 64: the rowwise padding rows of a dual call); the outputs equal
    the reference. (The columnwise scales of an NVFP4 dual swizzled call with M <= 64 were once
    stored past their buffer from uninitialized shared memory.)"""
    f = FORMATS[fmt]
    b, bits = f.block, f.element_bits
    d_dt, s_dt = getattr(torch, f.data_dtype), getattr(torch, f.scale_dtype)
    for m, k in ((64, 64), (64, 128), (32, 4 * b), (128, 4 * b)):
        if m % b or (transform == "rht" and (m % 16 or k % 16)):
            continue
        x = random_input(m, k, torch.bfloat16)
        for rowwise in (False, True):
            shapes = [((k, m * bits // 8), d_dt), (_t_scale_shape(f, m, k, layout), s_dt)]
            if rowwise:
                data_shape, scale_shape = checks.output_shapes(f, (m, k), m, layout)
                shapes = [(data_shape, d_dt), (scale_shape, s_dt), *shapes]
            pairs = [_guarded(tuple(s), dt) for s, dt in shapes]
            out = tuple(p[0] for p in pairs)
            if transform == "rht":
                g_row = kernelforge.nvfp4_global_scale(x) if rowwise else None
                g_col = kernelforge.rht_global_scale(x)
                for _ in range(3):
                    kernelforge.quantize_nvfp4_rht(x, global_scale_row=g_row, global_scale_col=g_col,
                                                   rowwise=rowwise, layout=layout, out=out)
                torch.cuda.synchronize()
                assert_matches(out[-2], out[-1], hadamard_columns(x), "nvfp4", "none", layout, g_col,
                               f"{m}x{k} rht")
            else:
                mode = "none" if f.has_global_scale else "floor"
                for _ in range(3):
                    _check_dual(x, fmt, mode, layout, _g(fmt), rowwise, out=out, what=f"{m}x{k}")
            for i, (_, guard) in enumerate(pairs):
                touched = (guard != 0xA5).nonzero()
                assert touched.numel() == 0, (f"{m}x{k} rowwise={rowwise}: {touched.numel()} bytes past out[{i}] "
                                              f"were written, first at +{touched[0].item()}")


def _t_scale_shape(f, m: int, k: int, layout: str) -> tuple:
    """The columnwise scale shape: that of rowwise quantization of x.T ([K, M])."""
    return tuple(checks.output_shapes(f, (k, m), k, layout)[1])


def test_3d_input_empty_and_errors():
    x3 = random_input(96, 256, torch.bfloat16).reshape(3, 32, 256)
    d, s, dt, st = _check_dual(x3, "mxfp8", "floor", "linear", None, True)
    assert d.shape == (3, 32, 256) and dt.shape == (256, 96) and st.shape == (256, 3)
    dt, st = kernelforge.quantize(torch.empty(0, 64, device="cuda", dtype=torch.bfloat16), "nvfp4",
                                  rowwise=False, columnwise=True, layout="swizzled")
    assert dt.shape == (64, 0) and st.shape == (128, 0)
    with pytest.raises(ValueError, match="M = 48"):
        kernelforge.quantize(random_input(48, 64, torch.bfloat16), "mxfp8", columnwise=True)
    with pytest.raises(TypeError, match="out"):
        kernelforge.quantize(random_input(64, 64, torch.bfloat16), "mxfp8", columnwise=True, out=(d, s))


def test_non_default_stream_and_cuda_graph():
    x = random_input(4096, 4096, torch.bfloat16)
    g = kernelforge.nvfp4_global_scale(x)
    res = kernelforge.quantize(x, "nvfp4", columnwise=True, global_scale=g, layout="swizzled")  # loads the module
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.cuda._sleep(20_000_000)
        res = kernelforge.quantize(x, "nvfp4", columnwise=True, global_scale=g, layout="swizzled", out=res)
        ev = torch.cuda.Event()
        ev.record(s)
    assert not ev.query(), "the stream finished too early to prove ordering"
    ev.synchronize()
    assert_matches(res[2], res[3], x.t().contiguous(), "nvfp4", "none", "swizzled", g)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernelforge.quantize(x, "nvfp4", columnwise=True, global_scale=g, layout="swizzled", out=res)
    for _ in range(2):
        x.copy_(random_input(4096, 4096, torch.bfloat16))
        g.copy_(kernelforge.nvfp4_global_scale(x))
        for r in res:
            r.view(torch.uint8).fill_(0xA5)
        graph.replay()
        torch.cuda.synchronize()
        assert_matches(res[0], res[1], x, "nvfp4", "none", "swizzled", g)
        assert_matches(res[2], res[3], x.t().contiguous(), "nvfp4", "none", "swizzled", g)


# ---- linear scales through swizzled scales and the layout pass (kernelforge/families/scale_layout/op.py) ----


class StagedCalls(list):
    """The layout pass's launches (the scale matrices of each). The shipped rule decides, whatever
    tuning table this card has (`launch.staging_rule` -> None); `every()` makes every format
    and output set take the staged path at any size, `rule(r)` follows a table's measured rule `r`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__()
        self.monkeypatch = monkeypatch
        real = scale_layout.pass_kernel

        def counted(linear):
            fn = real(linear)
            return lambda src, dst, src_t, dst_t: (self.append(2 if dst_t.numel() else 1), fn(src, dst, src_t, dst_t))

        monkeypatch.setattr(scale_layout, "pass_kernel", counted)
        monkeypatch.setattr(launch, "staging_rule", lambda dev: None)

    def every(self) -> None:
        self.rule({staging.pair_name(f, o): 0 for f in FORMATS for o in ("dual", "columnwise")})

    def rule(self, measured: dict) -> None:
        self.monkeypatch.setattr(launch, "staging_rule", lambda dev: measured)


@pytest.fixture
def staged_calls(monkeypatch):
    return StagedCalls(monkeypatch)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("fmt,mode", COMBOS)
def test_staged_linear_scales_match_the_reference(fmt, mode, dtype, staged_calls, poison):
    """Both output sets through the pass, into poisoned out= buffers followed by guard bytes: the
    bytes equal the reference, nothing past a buffer is written. Shapes: whole sectors of both
    scale matrices (M, K multiples of 32 blocks); columnwise-only also with K off the 128-row
    band (the pass's last band of scale_t is partial) and off the 4-column chunk."""
    staged_calls.every()
    f = FORMATS[fmt]
    b, bits = f.block, f.element_bits
    d_dt, s_dt = getattr(torch, f.data_dtype), getattr(torch, f.scale_dtype)
    g = _g(fmt)
    cases = [(32 * b, 32 * b, True), (64 * b, 32 * b, True), (32 * b, 32 * b, False), (32 * b, 200, False),
             (64 * b, 4 * b + 16, False)]
    for m, k, rowwise in cases:
        x = random_input(m, k, DTYPES[dtype])
        shapes = [((k, m * bits // 8), d_dt), (_t_scale_shape(f, m, k, "linear"), s_dt)]
        if rowwise:
            data_shape, scale_shape = checks.output_shapes(f, (m, k), m, "linear")
            shapes = [(data_shape, d_dt), (scale_shape, s_dt), *shapes]
        pairs = [_guarded(tuple(sh), dt) for sh, dt in shapes]
        out = tuple(poison(p[0]) for p in pairs)
        before = len(staged_calls)
        _check_dual(x, fmt, mode, "linear", g, rowwise, out=out, what=f"staged {m}x{k} {dtype}")
        assert len(staged_calls) == before + 1 and staged_calls[-1] == (2 if rowwise else 1), staged_calls
        for i, (_, guard) in enumerate(pairs):
            assert (guard == 0xA5).all(), f"staged {m}x{k}: bytes past out[{i}] were written"


def test_a_measured_staging_rule_decides_the_path(staged_calls):
    """A card's measured rule (its tuning table's `staging`) overrides the shipped one both ways:
    MXFP8 dual at 4096x4096, which the shipped rule stages, takes the direct kernel under a rule
    that never stages it; NVFP4 columnwise-only, which the shipped rule never stages, takes the
    pass under a rule that stages it from that size. Both paths equal the reference."""
    x = random_input(4096, 4096, torch.bfloat16)
    staged_calls.rule({"mxfp8.dual": None, "nvfp4.columnwise": 4096 * 4096})
    _check_dual(x, "mxfp8", "floor", "linear", None, True, what="rule: never staged")
    assert staged_calls == []
    g = torch.ones(1, device="cuda")
    _check_dual(x, "nvfp4", "none", "linear", g, False, what="rule: staged from 4096x4096")
    assert staged_calls == [1]
    _check_dual(x[:2048], "nvfp4", "none", "linear", g, False, what="rule: below its threshold")
    assert staged_calls == [1]


def test_staged_path_is_taken_at_the_shipped_threshold_and_refused_off_its_k_class(staged_calls):
    """The shipped rule stages MXFP8 dual at 4096x4096 (allocating call and out=); an out= scale
    buffer that is not 16-byte aligned takes the direct kernel. Both equal the reference."""
    x = random_input(4096, 4096, torch.bfloat16)
    res = _check_dual(x, "mxfp8", "floor", "linear", None, True, what="shipped threshold")
    assert staged_calls == [2]
    raw = torch.full((res[1].numel() + 4,), 0xA5, dtype=torch.uint8, device="cuda")
    misaligned = raw[4:].view(res[1].shape)
    out = (torch.empty_like(res[0]), misaligned, torch.empty_like(res[2]), torch.empty_like(res[3]))
    _check_dual(x, "mxfp8", "floor", "linear", None, True, out=out, what="misaligned scale buffer")
    assert staged_calls == [2], "a misaligned linear scale buffer must take the direct kernel"


def _copy_entries(src: Path, dest: Path, prefix: str) -> int:
    """Publish into a new cache at `dest` copies of the kernels of the cache at `src` whose name
    starts with `prefix`, with the runtime libraries they link (through the store, as a build
    publishes: files re-hashed, index and dispatch views written). `src` may be any layer: a
    user cache or an installed kernel wheel's (read-only) cache. Returns the kernels copied."""
    from kernelforge.cache import CacheStore

    source, target = CacheStore(src), CacheStore(dest)
    kernels = [e for e in source.iter_entries() if e.kind == "kernel" and e.name.startswith(prefix)]
    runtimes = {(e.extra or {}).get("runtime_key") for e in kernels}
    wanted = [e for e in source.iter_entries() if e.kind == "runtime" and e.key in runtimes] + kernels

    def copier(e):
        def build(staging: Path) -> dict:
            for rel in e.files:
                (staging / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source.entry_dir(e) / rel, staging / rel)
                shutil.copymode(source.entry_dir(e) / rel, staging / rel)
            return dict(kind=e.kind, op=e.op, name=e.name, variant=e.variant, arch=e.arch,
                        toolchain_id=e.toolchain_id, toolchain=e.toolchain, source_hash=e.source_hash,
                        main_file=e.main_file, build_time_s=e.build_time_s, extra=e.extra)
        return build

    with target.publishing_batch():
        for e in wanted:
            target.get_or_build(e.key, copier(e))
    return len(kernels)


def test_staged_calls_fall_back_to_the_direct_kernel_without_the_pass(tmp_path, monkeypatch, staged_calls):
    """A cache holding the columnwise builds but not the scale_layout pass (a selective build,
    made here by copying them out of the layer that serves them: the user cache, or an installed
    kernel wheel on a node that has no other) serves a call the rule stages with the direct
    kernel: the reference's bytes, no pass launched."""
    from kernelforge.runtime.arch import arch_runs_on

    table = launch.dispatch_table()
    capability = torch.cuda.get_device_capability()
    prefix = "quantize_columnwise.mxfp8."
    serving = [r.root for r in table.readers if r.root.is_dir() and any(
        c.entry.get("name", "").startswith(prefix) and arch_runs_on(c.arch, capability)
        for cands in r.groups().values() for c in cands)]
    assert serving, f"no layer holds {prefix}* kernels for capability {capability}: " + ", ".join(
        f"{r.label} ({r.root})" for r in table.readers)
    partial = tmp_path / "partial"
    assert _copy_entries(serving[0], partial, prefix) > 0
    monkeypatch.setattr(launch, "_table", table)  # restored after the test
    launch.set_cache_root(partial)
    assert not launch.dispatch_table().candidates("scale_layout", {}, torch.cuda.get_device_capability())
    x = random_input(4096, 4096, torch.bfloat16)
    _check_dual(x, "mxfp8", "floor", "linear", None, True, what="no pass in the cache")
    assert staged_calls == []


@pytest.mark.parametrize("fmt,mode", [("mxfp8", "rceil"), ("nvfp4", "none")])
def test_staged_calls_repeat_on_the_fast_path(fmt, mode, poison, forbid_checked_path, staged_calls):
    """Staged dual and columnwise-only calls into the same out= buffers skip validation (proved
    by breaking it), still launch the pass each time, and stay exact."""
    staged_calls.every()
    b = FORMATS[fmt].block
    g = _g(fmt)
    m, k = 32 * b, 32 * b
    outs = {rw: kernelforge.quantize(random_input(m, k, torch.bfloat16), fmt, rowwise=rw, columnwise=True,
                                     **op_kwargs(mode, "linear", g)) for rw in (True, False)}
    for rw, out in outs.items():
        _check_dual(random_input(m, k, torch.bfloat16), fmt, mode, "linear", g, rw, out=out)  # remembered
    before = len(staged_calls)
    with forbid_checked_path():
        for rw, out in outs.items():
            for t in out:
                poison(t)
            res = _check_dual(random_input(m, k, torch.bfloat16), fmt, mode, "linear", g, rw, out=out,
                              what="staged fast path")
            assert all(r is o for r, o in zip(res, out))
    assert staged_calls[before:] == [2, 1], staged_calls


def test_staged_path_on_a_side_stream_and_in_a_cuda_graph(staged_calls):
    """The staged call (swizzled kernel, scratch scales, pass) keeps stream order on a busy side
    stream, and replays from a CUDA graph (its scratch in the graph's pool) with fresh inputs."""
    x = random_input(4096, 4096, torch.bfloat16)
    res = kernelforge.quantize(x, "mxfp8", columnwise=True)  # loads both modules
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.cuda._sleep(20_000_000)
        for r in res:
            r.view(torch.uint8).fill_(0xA5)
        kernelforge.quantize(x, "mxfp8", columnwise=True, out=res)
        ev = torch.cuda.Event()
        ev.record(s)
    assert not ev.query(), "the stream finished too early to prove ordering"
    ev.synchronize()
    assert_matches(res[0], res[1], x, "mxfp8", "floor", "linear", None, "side stream rowwise")
    assert_matches(res[2], res[3], x.t().contiguous(), "mxfp8", "floor", "linear", None, "side stream columnwise")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernelforge.quantize(x, "mxfp8", columnwise=True, out=res)
    for _ in range(2):
        x.copy_(random_input(4096, 4096, torch.bfloat16))
        for r in res:
            r.view(torch.uint8).fill_(0xA5)
        graph.replay()
        torch.cuda.synchronize()
        assert_matches(res[0], res[1], x, "mxfp8", "floor", "linear", None, "graph rowwise")
        assert_matches(res[2], res[3], x.t().contiguous(), "mxfp8", "floor", "linear", None, "graph columnwise")
    assert staged_calls == [2, 2, 2], staged_calls  # eager, side stream, capture


# ---- NVFP4 with the random Hadamard transform ----

RHT_SHAPES = [(64, 128), (128, 256), (64, 64), (64, 144), (80, 128), (16, 16), (48, 144), (2048, 1024)]


@pytest.mark.parametrize("layout", ["linear", "swizzled"])
@pytest.mark.parametrize("rowwise", [False, True], ids=["columnwise", "both"])
def test_rht_matches_unfused_bytes_and_reference(layout, rowwise, poison):
    """The fused kernel equals quantize(rht(x)) of the torch butterfly bit for bit (same fp32
    operations), and the fp64 reference of docs/numerics.md within its tolerance."""
    tally = Tally()
    for m, n in RHT_SHAPES:
        x = random_input(m, n, torch.bfloat16)
        g_row = kernelforge.nvfp4_global_scale(x)
        g_col = kernelforge.rht_global_scale(x)
        res = kernelforge.quantize_nvfp4_rht(x, global_scale_row=g_row if rowwise else None, global_scale_col=g_col,
                                             rowwise=rowwise, layout=layout)
        torch.cuda.synchronize()
        assert len(res) == (4 if rowwise else 2)
        if rowwise:
            assert_matches(res[0], res[1], x, "nvfp4", "none", layout, g_row, f"{m}x{n} rowwise")
        y = hadamard_columns(x)
        assert_matches(res[-2], res[-1], y, "nvfp4", "none", layout, g_col, f"{m}x{n} rht")
        rd, rs = quantize_ref(rht_ref(x.cpu()), "nvfp4", layout=layout, global_scale=g_col.cpu())
        compare_fused(res[-2].cpu(), res[-1].cpu(), rd, rs, "nvfp4", layout, n, m,
                      torch.ones(n, dtype=torch.bool), f"{m}x{n}", tally)
    tally.check()


def test_rht_tile_and_edge_bytes_agree_and_errors():
    x = random_input(256, 256, torch.bfloat16)
    full = kernelforge.quantize_nvfp4_rht(x)
    # A misaligned copy of the same values runs the fallback ("edge") variant.
    base = torch.empty(256 * 256 + 8, dtype=torch.bfloat16, device="cuda")
    xm = base[1:1 + 256 * 256].view(256, 256)
    xm.copy_(x)
    edge = kernelforge.quantize_nvfp4_rht(xm)
    for a, b in zip(full, edge):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    for mask in (0, 0xFFFF, 0x1234):
        d, s = kernelforge.quantize_nvfp4_rht(x, sign_mask=mask, rowwise=False)
        assert_matches(d, s, hadamard_columns(x, mask), "nvfp4", "none", "swizzled", None, f"mask {mask:#x}")
    with pytest.raises(ValueError, match="multiples of 16"):
        kernelforge.quantize_nvfp4_rht(random_input(40, 64, torch.bfloat16))
    with pytest.raises(ValueError, match="dtype"):
        kernelforge.quantize_nvfp4_rht(x.half())
    with pytest.raises(ValueError, match="sign_mask"):
        kernelforge.quantize_nvfp4_rht(x, sign_mask=1 << 16)


def test_rht_global_scale_helper():
    x = random_input(256, 128, torch.bfloat16)
    g = kernelforge.rht_global_scale(x)
    amax = rht_ref(x.cpu()).float().abs().max().item()
    assert g.shape == (1,) and g.dtype == torch.float32
    assert g.item() == pytest.approx(448 * 6 / amax, rel=1e-2)
    assert kernelforge.rht_global_scale(torch.zeros(32, 32, dtype=torch.bfloat16, device="cuda")).item() == 1.0


@pytest.mark.parametrize("fmt,mode", [("mxfp8", "rceil"), ("nvfp4", "none")])
def test_fast_path_repeats_into_the_same_buffers(fmt, mode, poison, forbid_checked_path):
    """Dual, columnwise-only and RHT calls into the same out= buffers skip validation (proved by
    breaking it) and stay exact; a misaligned input of the same shape takes the checked path."""
    b = FORMATS[fmt].block
    g = _g(fmt)
    x = random_input(128, 8 * b, torch.bfloat16)
    outs = {rw: kernelforge.quantize(x, fmt, rowwise=rw, columnwise=True, **op_kwargs(mode, "swizzled", g))
            for rw in (True, False)}
    for rw, out in outs.items():
        _check_dual(random_input(128, 8 * b, torch.bfloat16), fmt, mode, "swizzled", g, rw, out=out)  # remembered
    rht_out = kernelforge.quantize_nvfp4_rht(x, global_scale_col=g) if fmt == "nvfp4" else None
    if rht_out is not None:
        kernelforge.quantize_nvfp4_rht(x, global_scale_col=g, out=rht_out)
    with forbid_checked_path():
        for _ in range(2):
            for rw, out in outs.items():
                for t in out:
                    poison(t)
                res = _check_dual(random_input(128, 8 * b, torch.bfloat16), fmt, mode, "swizzled", g, rw, out=out)
                assert all(r is o for r, o in zip(res, out))
            if rht_out is not None:
                xr = random_input(128, 8 * b, torch.bfloat16)
                for t in rht_out:
                    poison(t)
                res = kernelforge.quantize_nvfp4_rht(xr, global_scale_col=g, out=rht_out)
                torch.cuda.synchronize()
                assert_matches(res[2], res[3], hadamard_columns(xr), "nvfp4", "none", "swizzled", g, "rht fast path")
    base = random_input(1, 128 * 8 * b + 8, torch.bfloat16).view(-1)
    xm = base[1:1 + 128 * 8 * b].view(128, 8 * b)
    assert xm.data_ptr() % 16
    for t in outs[True]:
        poison(t)
    _check_dual(xm, fmt, mode, "swizzled", g, True, out=outs[True])


@pytest.mark.parametrize("g", [float("nan"), 0.0, -0.0, -1.5, float("inf"), float("-inf")])
def test_nvfp4_bad_global_scales_in_the_tile_kernels(g):
    """The dual tile kernel looks element factors up in a table: same defined bytes as the reference."""
    gt = torch.tensor([g], device="cuda")
    for m, k in ((128, 128), (64 + 16, 4 * 16)):  # tile and edge variants
        x = random_input(m, k, torch.bfloat16)
        x[3] = 0.0
        _check_dual(x, "nvfp4", "none", "swizzled", gt, True, what=f"g={g} {m}x{k}")


def test_tune_measures_the_staging_rule_of_this_card(monkeypatch):
    """`kernelforge tune`'s staging measurement (kernelforge/tuner/staging.py) on this card's builds,
    on a short ladder: both paths run (it checks they write the same bytes), each size is timed,
    and the threshold is one of the ladder's sizes or None; the section is a valid table part."""
    from kernelforge.cache.read.table_schema import validate_table
    from kernelforge.runtime.tuning import M_BUCKETS, SCHEMA
    from kernelforge.sources import source_hash
    from kernelforge.tuner import staging as tuner_staging

    monkeypatch.setattr(tuner_staging, "LADDER", ((2048, 4096), (4096, 4096)))
    logs: list[str] = []
    section = tuner_staging.measure_staging("quantize_columnwise|*format=nvfp4,layout=linear,outputs=dual*",
                                            1 << 20, logs.append)
    assert section is not None, logs
    assert set(section["min_elements"]) == {"nvfp4.dual"}, section
    assert section["min_elements"]["nvfp4.dual"] in (None, 2048 * 4096, 4096 * 4096)
    times = section["timings_us"]["nvfp4.dual"]
    assert set(times) == {"2048x4096", "4096x4096"}
    assert all(0 < t[p] < 1e4 for t in times.values() for p in ("direct", "staged")), times
    validate_table({"schema": SCHEMA, "device": "x", "arch": "sm_90a", "created": "now", "m_buckets": list(M_BUCKETS),
                    "choices": {}, "staging": section,
                    "sources": {op: source_hash(op) for op in ("quantize_columnwise", "scale_layout")}})
    assert tuner_staging.measure_staging("quantize|*", 1 << 20, logs.append) is None  # no pair matches
