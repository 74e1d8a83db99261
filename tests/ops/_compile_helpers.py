"""torch.compile capture for CPU tests of the torch.library integration."""
from __future__ import annotations

import torch


def capture(fn, *args):
    """Compile fn with fullgraph=True under a backend that keeps the FX graph and answers with
    empty tensors of the traced output shapes (no GPU here); return (graph, result)."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        vals = [n.meta["example_value"] for n in out]
        return lambda *a: tuple(torch.empty(v.shape, dtype=v.dtype) for v in vals)

    torch._dynamo.reset()
    result = torch.compile(fn, backend=backend, fullgraph=True)(*args)
    assert len(graphs) == 1
    return graphs[0], result
