"""Where the first NVFP4 call without a global scale spends its time: the cached [1.0] device tensor
that stands in for it (`ops._common.global_scale_arg`), made in a fresh process (torch imported,
CUDA context ready), stage by stage, against the ways it could be made. One JSON line per process.

    PYTHONPATH=. python benchmarks/diag_ones.py --how side_stream|current_stream|pinned|fill
"""
from __future__ import annotations

import argparse
import json
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--how", default="side_stream", choices=["side_stream", "current_stream", "pinned", "fill"])
    args = ap.parse_args()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    t = {}
    t0 = time.perf_counter()
    if args.how == "side_stream":
        side = torch.cuda.Stream()
        t["stream_ms"] = (time.perf_counter() - t0) * 1e3
        with torch.cuda.stream(side):
            one = torch.tensor([1.0], dtype=torch.float32, device="cuda")
        side.synchronize()
    elif args.how == "current_stream":
        one = torch.tensor([1.0], dtype=torch.float32, device="cuda")
    elif args.how == "pinned":
        host = torch.tensor([1.0], dtype=torch.float32).pin_memory()
        t["pin_ms"] = (time.perf_counter() - t0) * 1e3
        one = host.to("cuda", non_blocking=True)
        torch.cuda.current_stream().synchronize()
    else:
        one = torch.empty(1, device="cuda").fill_(1.0)
        torch.cuda.synchronize()
    t["total_ms"] = (time.perf_counter() - t0) * 1e3
    assert one.item() == 1.0
    print(json.dumps({"how": args.how, **{k: round(v, 3) for k, v in t.items()}}))


if __name__ == "__main__":
    main()
