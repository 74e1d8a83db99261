"""K-classes: compile-time specializations on K and on alignment (what the runtime matches a call
against). Separate from the spec model so that the runtime imports it without the variant and
spec-file records (each frozen dataclass class is costly to create at import);
`KClass` itself is a NamedTuple for the same reason."""

import math
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from kernelforge.errors import SpecError

KCLASS_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
KCLASS_FIELDS = ("k_multiple_blocks", "vector_bytes")
# Optional fields: 0 (the default) means "no bound" / "not used by this op's kernel".
KCLASS_OPTIONAL = ("max_k", "elements", "cluster", "m_multiple")
VECTOR_BYTES = (0, 1, 2, 4, 8, 16)


def _int_problem(v: Any, lo: int, hi: int | None = None) -> str | None:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        rng = f">= {lo}" if hi is None else f"in {lo}..{hi}"
        return f"expected an integer {rng}, got {v!r}"
    return None


def kclass_problem(fields: Mapping[str, Any], required: tuple[str, ...] = ()) -> tuple[str, str] | None:
    """The (key, reason) of the first invalid K-class field, or None when all are valid.

    `required` names optional fields that the op's kernel needs (see OpSchema.kclass_required).
    """
    known = KCLASS_FIELDS + KCLASS_OPTIONAL
    for key in fields:
        if key not in known:
            return key, f"unknown key; expected {list(known)}"
    for key in KCLASS_FIELDS + required:
        if key not in fields:
            return key, "missing"
    k, vb = fields["k_multiple_blocks"], fields["vector_bytes"]
    if _int_problem(k, 1):
        return "k_multiple_blocks", _int_problem(k, 1)  # type: ignore[return-value]
    if isinstance(vb, bool) or not isinstance(vb, int) or vb not in VECTOR_BYTES:
        return "vector_bytes", f"expected one of {list(VECTOR_BYTES)}, got {vb!r}"
    if "max_k" in fields and _int_problem(fields["max_k"], 0):
        return "max_k", _int_problem(fields["max_k"], 0)  # type: ignore[return-value]
    v = fields.get("elements", 0)
    if _int_problem(v, 0, 256) or v % 32:
        return "elements", f"expected a multiple of 32 in 32..256 (whole blocks of every format), got {v!r}"
    for key in required:
        if fields[key] == 0:
            return key, "must be non-zero for this op's kernel"
    v = fields.get("cluster", 1)
    if _int_problem(v, 1, 8) or v & (v - 1):
        return "cluster", f"expected 1, 2, 4 or 8 (CTAs of a thread-block cluster), got {v!r}"
    v = fields.get("m_multiple", 0)
    if _int_problem(v, 0, 128) or v & (v - 1):  # divides 128: the runtime memoizes on M mod 128
        return "m_multiple", f"expected 0 or a power of two up to 128, got {v!r}"
    return None


class KClass(NamedTuple):
    """A compile-time specialization on K (the reduced, last dimension) and on alignment.

    `k_multiple_blocks`: K is a multiple of this many scale blocks. `vector_bytes`: pointers
    and row strides are aligned to this (0: element-size accesses, no requirement).
    `max_k`: largest K in elements (0: unbounded). For kernels that keep whole rows on chip:
    `elements` is how many elements (whole scale blocks) each thread holds and `cluster` the
    CTAs (of a thread-block cluster) that share one row (0 / 1 where the op does not use them).
    `m_multiple`: M (the flattened leading dimensions) is a multiple of this (0: any M), for
    kernels that tile both dimensions.
    """

    name: str
    k_multiple_blocks: int
    vector_bytes: int
    max_k: int = 0
    elements: int = 0
    cluster: int = 1
    m_multiple: int = 0

    @property
    def specificity(self) -> tuple[int, int, float]:
        """Sort key: a more specialized class sorts higher (a tighter max_k is more specialized)."""
        return (self.vector_bytes, self.k_multiple_blocks, self.m_multiple,
                -self.max_k if self.max_k else -math.inf)

    def accepts(self, k: int, block: int, ptr_align_bytes: int, row_stride_bytes: int, m: int = 0) -> bool:
        """Whether a problem of M = `m` rows and K = `k` elements (blocks of `block`) with these
        alignments fits. K need not be a multiple of `block` where k_multiple_blocks is 1
        (columnwise-only quantization blocks along M)."""
        if self.k_multiple_blocks > 1 and k % (block * self.k_multiple_blocks):
            return False
        if (self.max_k and k > self.max_k) or (self.m_multiple and m % self.m_multiple):
            return False
        if self.vector_bytes > 0:
            return (ptr_align_bytes % self.vector_bytes == 0
                    and row_stride_bytes % self.vector_bytes == 0)
        return True

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, keys sorted."""
        d = {"cluster": self.cluster, "k_multiple_blocks": self.k_multiple_blocks,
             "elements": self.elements, "max_k": self.max_k, "name": self.name,
             "vector_bytes": self.vector_bytes}
        if self.m_multiple:  # only when set, so that the keys of classes without it never change
            d["m_multiple"] = self.m_multiple
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "KClass":
        """Inverse of `to_dict`; raise SpecError on a missing or invalid field."""
        name = d.get("name")
        if not isinstance(name, str) or not KCLASS_NAME.fullmatch(name):
            raise SpecError(f"kclass name: expected an identifier, got {name!r}")
        fields = {k: v for k, v in d.items() if k != "name"}
        bad = kclass_problem(fields)
        if bad:
            raise SpecError(f"kclass {name!r} {bad[0]}: {bad[1]}")
        return cls(name, **fields)
