"""`trimmed_masks`: the trimmed mask and md = 2 <trimmed a, trimmed b>."""

from __future__ import annotations

from typing import List

from ocelli_replay import iris
from ocelli_replay.check import digest16, eq
from ocelli_replay.loader import Spec, Vector
from ocelli_replay.schema import DIGEST16, TEMPLATE

CASES = {
    "pair": {
        "a": TEMPLATE,
        "b": TEMPLATE,
        "trimmed_a": DIGEST16,
        "trimmed_b": DIGEST16,
        "ones_a": "usize",
        "trimmed_dot": "u64",
        "md": "u16",
    }
}


def verify(v: Vector, _all: List[Vector]) -> None:
    c = v.case
    ma = iris.unpack(c["a"]["mask"], "a.mask")
    mb = iris.unpack(c["b"]["mask"], "b.mask")
    ta, tb = iris.trimmed_mask_coefs(ma), iris.trimmed_mask_coefs(mb)
    digest16("trimmed_a", ta, c["trimmed_a"])
    digest16("trimmed_b", tb, c["trimmed_b"])
    eq("ones_a", sum(ta), c["ones_a"])
    eq("ones_a = usable_bits / 2", sum(ma) // 2, c["ones_a"])
    dot = sum(x * y for x, y in zip(ta, tb))
    eq("trimmed_dot", dot, c["trimmed_dot"])
    eq("md", 2 * dot & 0xFFFF, c["md"])
    eq("md = #common bits", sum(x & y for x, y in zip(ma, mb)) & 0xFFFF, c["md"])


SPEC = Spec("trimmed_masks", CASES, verify)
