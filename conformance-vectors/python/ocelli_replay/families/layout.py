"""`layout`: the permutation from share coefficients to plain bits."""

from __future__ import annotations

from typing import List

from ocelli_replay import iris
from ocelli_replay.check import eq
from ocelli_replay.loader import Spec, Vector

CASES = {
    "table": {"plain_bit_index": "u16hex"},
    "entry": {"coef": "usize", "plain_bit": "usize"},
}


def verify(v: Vector, _all: List[Vector]) -> None:
    c = v.case
    if v.kind == "table":
        got = iris.LAYOUT
        expected = c["plain_bit_index"]
        eq("plain_bit_index: length", len(expected), len(got))
        for i, (g, e) in enumerate(zip(got, expected)):
            eq(f"plain_bit_index[{i}]", g, e)
        eq("plain_bit_index: a permutation", sorted(got), list(range(iris.CODE_BITS)))
    else:
        eq(f"plain_bit of coef {c['coef']}", iris.plain_bit_index(c["coef"]), c["plain_bit"])


SPEC = Spec("layout", CASES, verify)
