"""Grouped quantization on the GPU: every cached build and the public functions against the
docs/numerics.md references, bit for bit.

Inputs are fresh random draws each run (log-uniform magnitudes, random signs, every input
finite); outputs are poisoned before each launch; every byte of data, scale (padding and the
rows of no group included) and scale_offsets is compared with the reference.
"""
from __future__ import annotations

import pytest
import torch

import kernelforge
import kernelforge.ops  # noqa: F401  (registers torch.ops.kernelforge.*)
from kernelforge.families.quantize_grouped.op import MAX_GROUPS, experts_shapes, grouped_shapes
from kernelforge.families.quantize_grouped.reference import quantize_experts_ref, quantize_grouped_ref
from kernelforge.formats import FORMATS
from kernelforge.ops import launch
from kernelforge.runtime.arch import arch_runs_on
from kernelforge.testing.inputs import POISON_BYTE

pytestmark = pytest.mark.gpu

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
COMBOS = [(f, m) for f in FORMATS for m in FORMATS[f].scale_modes]
# Group sizes with empty groups first, in the middle and last, and sizes around 128.
UNEVEN = [0, 1, 127, 0, 128, 129, 3, 0]


def _random(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    """Log-uniform magnitudes over many binades, random signs, a random gain per row; finite in dtype."""
    top = 4 if dtype == torch.float16 else 20
    mag = torch.exp2(torch.empty(shape, device="cuda").uniform_(-6, 6))
    gain = torch.exp2(torch.randint(-top, top, (*shape[:-1], 1), device="cuda").float())
    sign = torch.where(torch.rand(shape, device="cuda") < 0.5, -1.0, 1.0)
    return (mag * sign * gain).to(dtype)


def _ends(sizes: list[int]) -> torch.Tensor:
    return torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)


def _global(fmt: str, n: int) -> list:
    """The NVFP4 global-scale choices: None, one shared [1], one per group [n]; [None] for MX."""
    if not FORMATS[fmt].has_global_scale:
        return [None]
    return [None, torch.rand(1, device="cuda") * 1000 + 1, torch.rand(n, device="cuda") * 1000 + 1]


def _mode_kw(mode: str) -> dict:
    return {} if mode == "none" else {"scale_mode": mode}


def _ref_mode(mode: str) -> str:
    return "floor" if mode == "none" else mode


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8)


def _same(what: str, got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    bad = (got != want).nonzero()
    assert bad.numel() == 0, f"{what}: {bad.shape[0]} bytes differ, first at {bad[:4].tolist()}"


def _outs(d_shape, s_shape, fmt: str, poison, groups: int | None = None, scale_shift: int = 0):
    """Poisoned out buffers; the scale matrix starts `scale_shift` bytes into its allocation,
    which has 16 poisoned bytes after it as well (see `_untouched_around`)."""
    f = FORMATS[fmt]
    data = poison(torch.empty(d_shape, dtype=getattr(torch, f.data_dtype), device="cuda"))
    n = torch.Size(s_shape).numel()
    raw = poison(torch.empty(scale_shift + n + 16, dtype=torch.uint8, device="cuda"))
    scale = raw[scale_shift: scale_shift + n].view(getattr(torch, f.scale_dtype)).view(s_shape)
    if groups is None:
        return data, scale
    return data, scale, poison(torch.empty(groups, dtype=torch.int32, device="cuda"))


def _untouched_around(what: str, scale: torch.Tensor, shift: int) -> None:
    """The `shift` bytes before the scale matrix in its allocation and the 16 after it (`_outs`)
    still hold the poison."""
    whole = torch.empty(0, dtype=torch.uint8, device="cuda").set_(scale.untyped_storage())
    n = scale.numel()
    around = torch.cat([whole[:shift], whole[shift + n:]])
    assert around.numel() == shift + 16 and bool((around == POISON_BYTE).all()), \
        f"{what}: bytes around the scale matrix were written"


def _check_experts(w, fmt, mode, layout, g, poison, tag=""):
    f = FORMATS[fmt]
    d_shape, s_shape = experts_shapes(f, *w.shape, layout)
    out = _outs(d_shape, s_shape, fmt, poison)
    data, scale = kernelforge.quantize_experts(w, fmt, layout=layout, global_scale=g, out=out, **_mode_kw(mode))
    assert data is out[0] and scale is out[1]
    rd, rs = quantize_experts_ref(w, fmt, layout=layout, scale_mode=_ref_mode(mode), global_scale=g)
    name = f"experts {fmt}/{mode}/{layout} {tuple(w.shape)} {w.dtype} g={None if g is None else g.numel()}{tag}"
    _same(name + " scale", _bytes(scale), rs)
    _same(name + " data", _bytes(data), rd)


def _check_grouped(x, ends, fmt, mode, g, poison, tag="", scale_shift=0):
    f = FORMATS[fmt]
    groups = ends.shape[0]
    d_shape, s_shape = grouped_shapes(f, x.shape[0], x.shape[1], groups)
    out = _outs(d_shape, s_shape, fmt, poison, groups, scale_shift)
    data, scale, offs = kernelforge.quantize_grouped(x, ends, fmt, global_scale=g, out=out, **_mode_kw(mode))
    assert data is out[0] and scale is out[1] and offs is out[2]
    rd, rs, ro = quantize_grouped_ref(x, ends, fmt, scale_mode=_ref_mode(mode), global_scale=g)
    name = f"grouped {fmt}/{mode} {tuple(x.shape)} G={groups} {x.dtype} g={None if g is None else g.numel()}{tag}"
    _untouched_around(name, scale, scale_shift)
    _same(name + " scale_offsets", offs, ro)
    _same(name + " scale", _bytes(scale), rs)
    _same(name + " data", _bytes(data), rd)


# ---------------------------------------------------------------- every cached build


def _builds():
    table = launch.dispatch_table()
    cap = torch.cuda.get_device_capability()
    out = []
    for group, cands in sorted(table.groups().items()):
        if group.split("|", 1)[0] == "quantize_grouped":
            out.extend((c, table.load(c)) for c in cands if arch_runs_on(c.arch, cap))
    assert out, "no quantize_grouped builds for this GPU in the cache"
    return out


def test_every_build(poison):
    """Each cached build called directly (also the ones the runtime would not pick here)."""
    n = 0
    for cand, fn in _builds():
        coords = cand.entry["extra"]["dispatch"]
        fmt, mode = coords["format"], coords["scale_mode"]
        f = FORMATS[fmt]
        k = (8 if cand.kclass.k_multiple_blocks % 4 == 0 else 5) * f.block
        dtype = DTYPES[coords["dtype"]]
        name = cand.entry["name"]
        if coords["grouping"] == "experts":
            w = _random(3, 130, k, dtype=dtype)
            g = torch.rand(3, device="cuda") * 1000 + 1 if f.has_global_scale else None
            data, scale = _outs(*experts_shapes(f, 3, 130, k, coords["layout"]), fmt, poison)
            fn(w, None, data, scale, None, g)
            rd, rs = quantize_experts_ref(w, fmt, layout=coords["layout"], scale_mode=_ref_mode(mode), global_scale=g)
            offs = ro = None
        else:
            ends = _ends(UNEVEN)
            x = _random(int(ends[-1]), k, dtype=dtype)
            g = torch.rand(len(UNEVEN), device="cuda") * 1000 + 1 if f.has_global_scale else None
            data, scale, offs = _outs(*grouped_shapes(f, x.shape[0], k, len(UNEVEN)), fmt, poison, len(UNEVEN))
            fn(x, ends, data, scale, offs, g)
            rd, rs, ro = quantize_grouped_ref(x, ends, fmt, scale_mode=_ref_mode(mode), global_scale=g)
        torch.cuda.synchronize()
        _same(f"{name}: scale", _bytes(scale), rs)
        _same(f"{name}: data", _bytes(data), rd)
        if offs is not None:
            _same(f"{name}: scale_offsets", offs, ro)
        n += 1
    assert n >= 2


# ---------------------------------------------------------------- quantize_experts


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("fmt,mode", COMBOS)
def test_experts(fmt, mode, dtype, poison):
    """N around 128 (not only multiples), both K-classes, NVFP4 with one or per-expert global scales."""
    b = FORMATS[fmt].block
    for layout in ("linear", "swizzled"):
        for e, n, k in ((3, 130, 8 * b), (2, 1, 5 * b), (1, 128, 4 * b), (4, 127, 3 * b), (2, 129, 64 * b)):
            w = _random(e, n, k, dtype=DTYPES[dtype])
            for g in _global(fmt, e):
                _check_experts(w, fmt, mode, layout, g, poison)


def test_experts_misaligned_and_empty(poison):
    """A misaligned weight stack dispatches to the general K-class; empty stacks launch nothing."""
    base = _random(3 * 130 * 256 + 1, dtype=torch.bfloat16)
    w = base[1:].view(3, 130, 256)
    assert w.data_ptr() % 16
    for fmt, mode in COMBOS:
        _check_experts(w, fmt, mode, "swizzled", None, poison, " misaligned")
    for shape in ((0, 4, 64), (3, 0, 64), (3, 4, 0)):
        data, scale = kernelforge.quantize_experts(torch.zeros(shape, device="cuda"), "mxfp8")
        assert data.shape == (shape[0], shape[1], shape[2]) and scale.shape == experts_shapes(
            FORMATS["mxfp8"], *shape, "swizzled")[1]


# ---------------------------------------------------------------- quantize_grouped


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("fmt,mode", COMBOS)
def test_grouped(fmt, mode, dtype, poison):
    """Uneven groups, empty groups (first, middle, last), sizes 0/1/127/128/129, T = 0, one group,
    more groups than a warp has lanes; both K-classes; NVFP4 with one or per-group global scales."""
    b = FORMATS[fmt].block
    many = torch.randint(0, 300, (45,))
    many[torch.randperm(45)[:10]] = 0
    cases = [UNEVEN, [0], [0, 0, 0], [300], [129], [5, 0], many.tolist()]
    for sizes in cases:
        for k in (8 * b, 5 * b):
            ends = _ends(sizes)
            x = _random(int(ends[-1]), k, dtype=DTYPES[dtype])
            for g in _global(fmt, len(sizes)):
                _check_grouped(x, ends, fmt, mode, g, poison)


@pytest.mark.parametrize("fmt,mode", COMBOS)
def test_grouped_strided_and_misaligned(fmt, mode, poison):
    b = FORMATS[fmt].block
    ends = _ends(UNEVEN)
    t = int(ends[-1])
    base = _random(t, 12 * b + 8, dtype=torch.bfloat16)
    for x, tag in ((base[:, : 8 * b], " row-strided"), (base[:, 8: 8 + 8 * b], " misaligned")):
        _check_grouped(x, ends, fmt, mode, None, poison, tag)
    # A scale matrix on a 4-byte but not 16-byte boundary: the padding is zeroed by words, not lines.
    _check_grouped(base[:, : 8 * b], ends, fmt, mode, None, poison, " scale 4 bytes off", scale_shift=4)


@pytest.mark.parametrize("fmt,mode", [("mxfp8", "floor"), ("nvfp4", "none")])
def test_grouped_max_groups(fmt, mode, poison):
    """MAX_GROUPS groups (32 per lane of the table-building warp), many of them empty."""
    sizes = torch.randint(0, 4, (MAX_GROUPS,))
    sizes = torch.where(sizes == 3, torch.full_like(sizes, 130), sizes).tolist()
    ends = _ends(sizes)
    x = _random(int(ends[-1]), 4 * FORMATS[fmt].block, dtype=torch.bfloat16)
    g = torch.rand(MAX_GROUPS, device="cuda") * 1000 + 1 if FORMATS[fmt].has_global_scale else None
    _check_grouped(x, ends, fmt, mode, g, poison)
    with pytest.raises(ValueError, match="group_offsets: expected 1 to"):
        kernelforge.quantize_grouped(x, torch.cat([ends[:1], ends]), fmt)


@pytest.mark.parametrize("fmt,mode", [("mxfp8", "floor"), ("nvfp4", "none")])
def test_grouped_large_groups_and_an_empty_one(fmt, mode, poison):
    """About 256k rows in 4 groups, one empty, the others not multiples of 128: the binary search
    over group ends takes its long steps, and the padded scale rows span 2048 and 2049 blocks."""
    b = FORMATS[fmt].block
    g = torch.rand(4, device="cuda") * 1000 + 1 if FORMATS[fmt].has_global_scale else None
    for sizes in ([128 * 700, 0, 128 * 1000 - 5, 128 * 348 - 1], [128 * 700, 0, 128 * 1000 - 5, 128 * 348 + 1]):
        ends = _ends(sizes)
        x = _random(int(ends[-1]), 4 * b, dtype=torch.bfloat16)
        blocks = sum(-(-n // 128) for n in sizes)
        _check_grouped(x, ends, fmt, mode, g, poison, f" ({blocks} scale blocks)")


def test_grouped_check_offsets_rejects_bad_offsets_before_launch(poison):
    """The opt-in synchronous check (check_offsets=True) raises before anything is launched."""
    x = _random(10, 64, dtype=torch.bfloat16)
    out = _outs((10, 64), grouped_shapes(FORMATS["mxfp8"], 10, 64, 2)[1], "mxfp8", poison, 2)
    for bad in ((5, 4), (-1, 10), (3, 9), (3, 11)):
        offsets = torch.tensor(bad, dtype=torch.int32, device="cuda")
        assert not bool(kernelforge.group_offsets_valid(offsets, 10))
        with pytest.raises(ValueError, match="^group_offsets: "):
            kernelforge.quantize_grouped(x, offsets, "mxfp8", out=out, check_offsets=True)
    torch.cuda.synchronize()
    assert (_bytes(out[0]) == 0xA5).all() and (_bytes(out[1]) == 0xA5).all()  # nothing was launched


# ---------------------------------------------------------------- CUDA graphs, torch integration


def test_grouped_cuda_graph_capture_and_replay(poison):
    """Captured once; replayed with new inputs, new group sizes (same T) and new per-group global
    scales written into the same tensors: equals the reference every time."""
    t, k, sizes = 700, 256, [5, 0, 200, 57, 0, 438]
    x = _random(t, k, dtype=torch.bfloat16)
    ends = _ends(sizes)
    g = torch.rand(len(sizes), device="cuda") * 1000 + 1
    f = FORMATS["nvfp4"]
    out = _outs(*grouped_shapes(f, t, k, len(sizes)), "nvfp4", poison, len(sizes))
    kernelforge.quantize_grouped(x, ends, "nvfp4", global_scale=g, out=out)  # warm-up: module loaded
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernelforge.quantize_grouped(x, ends, "nvfp4", global_scale=g, out=out)
    for step in range(3):
        new_sizes = torch.tensor(sizes)[torch.randperm(len(sizes))].tolist() if step else sizes
        x.copy_(_random(t, k, dtype=torch.bfloat16))
        ends.copy_(_ends(new_sizes))
        g.copy_(torch.rand(len(sizes), device="cuda") * 1000 + 1)
        for o in out:
            poison(o)
        graph.replay()
        torch.cuda.synchronize()
        rd, rs, ro = quantize_grouped_ref(x, ends, "nvfp4", global_scale=g)
        _same(f"replay {step} scale_offsets", out[2], ro)
        _same(f"replay {step} scale", _bytes(out[1]), rs)
        _same(f"replay {step} data", _bytes(out[0]), rd)


@pytest.mark.parametrize("mode", ["capture", "eager"])
@pytest.mark.parametrize("bad", [[-5, 300, 100, 10**9], [100, 50, 80, 120], [-2**31, -1, 0, 2**31 - 1],
                                 [250, 250, 250, 250], [0, 0, 0, 0]])
def test_invalid_offsets_stay_in_bounds(bad, mode, poison):
    """Offsets are never read on the host (eagerly or while capturing): the kernel clamps them
    (end[g] = clamp(max(offsets[0..g]), 0, T)), writes exactly what the reference writes for the
    clamped groups, and nothing outside its buffers (guard bytes around each)."""
    t, k, groups, guard = 250, 128, 4, 4096
    x = _random(t, k, dtype=torch.float32)
    f = FORMATS["mxfp8"]
    d_shape, s_shape = grouped_shapes(f, t, k, groups)
    d_n, s_n = d_shape[0] * d_shape[1], s_shape[0] * s_shape[1]
    d_buf = poison(torch.empty(d_n + 2 * guard, dtype=torch.uint8, device="cuda"))
    s_buf = poison(torch.empty(s_n + 2 * guard, dtype=torch.uint8, device="cuda"))
    o_buf = poison(torch.empty(groups + 2 * guard, dtype=torch.int32, device="cuda"))
    out = (d_buf[guard:guard + d_n].view(d_shape), s_buf[guard:guard + s_n].view(s_shape),
           o_buf[guard:guard + groups])
    offsets = _ends([60, 60, 60, 70])
    kernelforge.quantize_grouped(x, offsets, "mxfp8", out=out)  # warm-up with valid offsets
    torch.cuda.synchronize()
    if mode == "capture":
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            kernelforge.quantize_grouped(x, offsets, "mxfp8", out=out)
    offsets.copy_(torch.tensor(bad, dtype=torch.int32))
    for o in out:
        poison(o)
    if mode == "capture":
        graph.replay()
    else:
        valid = bad[0] >= 0 and bad[-1] == t and all(a <= b for a, b in zip(bad, bad[1:]))
        assert bool(kernelforge.group_offsets_valid(offsets, t)) == valid
        if not valid:
            with pytest.raises(ValueError, match=r"^group_offsets: "):
                kernelforge.quantize_grouped(x, offsets, "mxfp8", out=out, check_offsets=True)
        kernelforge.quantize_grouped(x, offsets, "mxfp8", out=out)
    torch.cuda.synchronize()
    for name, buf, n in (("data", d_buf, d_n), ("scale", s_buf, s_n)):
        assert (buf[:guard] == 0xA5).all() and (buf[guard + n:] == 0xA5).all(), f"{name}: written out of bounds"
    assert (_bytes(o_buf[:guard]) == 0xA5).all() and (_bytes(o_buf[guard + groups:]) == 0xA5).all()
    ends = torch.tensor(bad, dtype=torch.int64).cummax(0).values.clamp(0, t).to(torch.int32).cuda()
    covered = int(ends[-1])
    rd, rs, ro = quantize_grouped_ref(x[:covered], ends, "mxfp8")
    _same("clamped scale_offsets", out[2], ro)
    _same("clamped scale", _bytes(out[1])[: rs.shape[0]], rs)
    assert not _bytes(out[1])[rs.shape[0]:].any(), "rows after the last group must be zero"
    _same("clamped data", _bytes(out[0])[:covered], rd)


@pytest.mark.parametrize("fmt,mode", [("mxfp8", "floor"), ("nvfp4", "none")])
def test_out_fast_path_with_new_offsets_every_call(fmt, mode, poison, forbid_checked_path):
    """An MoE layer's pattern: the same out buffers, new inputs and new group offsets every step.
    After one checked call the repeats are served by the out= fast path (the checked path is
    forbidden) and write the reference bytes; offsets the checked path refuses still reach it."""
    f, groups, t = FORMATS[fmt], 8, 1024
    xs = [_random(t, 256, dtype=torch.bfloat16) for _ in range(2)]
    d_shape, s_shape = grouped_shapes(f, t, 256, groups)
    out = _outs(d_shape, s_shape, fmt, poison, groups)

    def ends() -> torch.Tensor:
        return torch.multinomial(torch.ones(groups), t, replacement=True).bincount(minlength=groups).cuda().cumsum(
            0).to(torch.int32)

    kernelforge.quantize_grouped(xs[0], ends(), fmt, out=out, **_mode_kw(mode))  # checked: remembered
    for step in range(4):
        x, e = xs[step % 2], ends()
        for o in out:
            poison(o)
        with forbid_checked_path():
            got = kernelforge.quantize_grouped(x, e, fmt, out=out, **_mode_kw(mode))
        assert all(a is b for a, b in zip(got, out))
        rd, rs, ro = quantize_grouped_ref(x, e, fmt, scale_mode=_ref_mode(mode))
        name = f"fast path step {step} {fmt}"
        _same(name + " scale_offsets", out[2], ro)
        _same(name + " scale", _bytes(out[1]), rs)
        _same(name + " data", _bytes(out[0]), rd)
    with pytest.raises(ValueError, match="group_offsets: expected dtype torch.int32"):
        kernelforge.quantize_grouped(xs[0], ends().long(), fmt, out=out, **_mode_kw(mode))
    with pytest.raises(ValueError, match="must not overlap group_offsets"):
        kernelforge.quantize_grouped(xs[0], out[2], fmt, out=out, **_mode_kw(mode))


def test_eager_call_never_synchronizes():
    """An eager quantize_grouped call returns while earlier work on its stream still runs: the
    offsets are not read on the host (a read would wait for the spin kernel queued before)."""
    x = _random(512, 256, dtype=torch.bfloat16)
    offsets = _ends([100, 0, 300, 112])
    kernelforge.quantize_grouped(x, offsets, "nvfp4")  # load the kernel first
    torch.cuda.synchronize()
    stream = torch.cuda.current_stream()
    torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time at H100 clocks
    kernelforge.quantize_grouped(x, offsets, "nvfp4")
    still_running = not stream.query()
    torch.cuda.synchronize()
    assert still_running, "quantize_grouped waited for the stream (a host read of the offsets?)"


def test_torch_compile_and_opcheck():
    def block(w, x, offs, g):
        dw, sw = kernelforge.quantize_experts(w * 2, "nvfp4", global_scale=g)
        dx, sx, ox = kernelforge.quantize_grouped(x + 1, offs, "mxfp4", scale_mode="rceil")
        return dw, sw, dx, sx, ox

    w = torch.randn(4, 130, 512, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(300, 512, device="cuda", dtype=torch.bfloat16)
    offs = _ends([0, 100, 200])
    g = torch.rand(4, device="cuda") * 100 + 1
    torch._dynamo.reset()
    got = torch.compile(block, fullgraph=True)(w, x, offs, g)
    want = block(w, x, offs, g)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(_bytes(a), _bytes(b)) if a.element_size() == 1 else torch.equal(a, b)
    utils = ("test_schema", "test_faketensor", "test_autograd_registration")
    torch.library.opcheck(torch.ops.kernelforge.quantize_experts, (w, "nvfp4", "swizzled", "none", g), test_utils=utils)
    torch.library.opcheck(torch.ops.kernelforge.quantize_grouped, (x, offs, "mxfp8", "floor", None), test_utils=utils)


def test_tuner_times_grouped_builds():
    """`kernelforge tune` can time every grouping (should a spec list several candidates)."""
    from kernelforge.tuner.measure import gpu_us, make_calls, problem_k

    seen = set()
    for cand, fn in _builds():
        coords = cand.entry["extra"]["dispatch"]
        if coords["grouping"] in seen or coords["format"] != "nvfp4":
            continue
        seen.add(coords["grouping"])
        k = problem_k("quantize_grouped", cand, FORMATS["nvfp4"].block)
        assert 0 < gpu_us(make_calls("quantize_grouped", coords, fn, 130, k, 1 << 20)) < 1e4
    assert seen == {"experts", "offsets"}
