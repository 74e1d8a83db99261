"""Host cost of the ways an allocating op can make its two outputs (data, scale), on the GPU.

    PYTHONPATH=. python benchmarks/diag_alloc.py

Prints us per call (best of interleaved rounds, benchmarks/_timing.host_us) for: two
torch.empty calls (what ops do), one byte buffer split into two typed views, torch.empty with
an int device, torch.empty_like of tensors of the right shapes, and one torch.empty.
"""
from __future__ import annotations

import json

import torch

from _timing import host_us


def main() -> None:
    dev = torch.device("cuda", 0)
    fp8, e8 = torch.float8_e4m3fn, torch.float8_e8m0fnu
    d_shape, s_shape = (128, 256), (128, 8)
    nd = 128 * 256
    ns = 128 * 8

    def two_empty():
        return torch.empty(d_shape, dtype=fp8, device=dev), torch.empty(s_shape, dtype=e8, device=dev)

    def two_empty_int():
        return torch.empty(d_shape, dtype=fp8, device=0), torch.empty(s_shape, dtype=e8, device=0)

    def one_buffer_views():
        buf = torch.empty(nd + ns, dtype=torch.uint8, device=dev)
        return buf[:nd].view(fp8).view(d_shape), buf[nd:].view(e8).view(s_shape)

    def one_buffer_split():
        d, s = torch.empty(nd + ns, dtype=torch.uint8, device=dev).split((nd, ns))
        return d.view(fp8).view(d_shape), s.view(e8).view(s_shape)

    like_d, like_s = torch.empty(d_shape, dtype=fp8, device=dev), torch.empty(s_shape, dtype=e8, device=dev)

    def empty_like_pair():
        return torch.empty_like(like_d), torch.empty_like(like_s)

    paths = {"two torch.empty": two_empty, "two torch.empty (int device)": two_empty_int,
             "one buffer + slice views": one_buffer_views, "one buffer + split views": one_buffer_split,
             "two empty_like": empty_like_pair, "one torch.empty": lambda: torch.empty(d_shape, dtype=fp8, device=dev)}
    best: dict[str, float] = {}
    for _ in range(3):
        for name, f in paths.items():
            best[name] = min(best.get(name, float("inf")), host_us(f))
    for name, us in best.items():
        print(f"{name:32s} {us:6.2f} us")
    print(json.dumps({"device": torch.cuda.get_device_name(), **best}))


if __name__ == "__main__":
    main()
