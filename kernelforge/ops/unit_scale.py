"""The cached fp32 [1.0] device tensor that stands in for an NVFP4 global scale the caller left out.

It is written once per device by a host-to-device copy on a private stream that only this copy
waits for: on the caller's stream the copy would wait for all work queued there (and is not
allowed while that stream captures a CUDA graph), and a fill kernel there would leave it
unwritten until a captured graph replays. While a graph is being captured the copy runs with
this thread's capture mode set to relaxed: the default (global) mode refuses a pageable copy
and its synchronization on any stream ("operation not permitted when stream is capturing").

The private stream is created through the CUDA driver (`cuStreamCreate`): `torch.cuda.Stream()`
first fills torch's pool of streams for the device, which costs far more than the copy itself
and would dominate an NVFP4 op's first call without a global scale (docs/performance.md;
`benchmarks/diag.py ones`).
"""
from __future__ import annotations

import ctypes
from typing import Optional

import torch

_CU_STREAM_NON_BLOCKING = 1  # no implicit ordering with the legacy default stream
_CU_STREAM_CAPTURE_MODE_RELAXED = 2
_ones: dict[torch.device, torch.Tensor] = {}
_libcuda: Optional[ctypes.CDLL] = None


def unit_scale(device: torch.device) -> torch.Tensor:
    """fp32 [1] tensor holding 1.0 on `device`, written and complete before it is returned."""
    one = _ones.get(device)
    if one is None:
        with torch.cuda.device(device):
            one = _written_on_private_stream(device)
        _ones[device] = one
    return one


def _written_on_private_stream(device: torch.device) -> torch.Tensor:
    raw = _create_raw_stream()
    relaxed = False
    mode = ctypes.c_int(_CU_STREAM_CAPTURE_MODE_RELAXED)
    try:
        if raw is None:  # no driver library by that name: torch's pooled stream, the slower start
            side = torch.cuda.Stream(device=device)
        else:
            side = torch.cuda.ExternalStream(raw.value, device=device)
            relaxed = _libcuda.cuThreadExchangeStreamCaptureMode(ctypes.byref(mode)) == 0
        with torch.cuda.stream(side):  # allocated outside any graph's private pool, copied there
            one = torch.tensor([1.0], dtype=torch.float32, device=device)
        side.synchronize()
    finally:
        if relaxed:
            _libcuda.cuThreadExchangeStreamCaptureMode(ctypes.byref(mode))  # the caller's mode back
        if raw is not None:
            _libcuda.cuStreamDestroy_v2(raw)
    return one


def _create_raw_stream() -> Optional[ctypes.c_void_p]:
    """A new non-blocking stream of the current context (torch made the device's context current)."""
    global _libcuda
    try:
        if _libcuda is None:
            _libcuda = ctypes.CDLL("libcuda.so.1")
        raw = ctypes.c_void_p()
        if _libcuda.cuStreamCreate(ctypes.byref(raw), _CU_STREAM_NON_BLOCKING) != 0:
            return None
        return raw
    except (OSError, AttributeError):
        return None
