"""`ring`: constants and arithmetic of GR(2^16, 4)."""

from __future__ import annotations

from typing import List

from ocelli_replay import ring
from ocelli_replay.check import eq
from ocelli_replay.loader import Failure, Spec, Vector
from ocelli_replay.schema import ELEMENT, ListOf, Opt

_BINARY = {"a": ELEMENT, "b": ELEMENT, "expected": ELEMENT}
_UNARY = {"a": ELEMENT, "expected": ELEMENT}
CASES = {
    "constants": {
        "s": ListOf(ELEMENT),
        "s_inv": ListOf(ELEMENT),
        "m": ListOf(ELEMENT),
        "evaluation_points": ListOf(ELEMENT),
        "lagrange_at_zero": ListOf(ELEMENT),
    },
    "add": _BINARY,
    "sub": _BINARY,
    "mul": _BINARY,
    "mul_x": _UNARY,
    "inverse": {"a": ELEMENT, "expected": Opt(ELEMENT)},
    "from_basis_a": _UNARY,
    "to_basis_a": _UNARY,
    "to_basis_b": _UNARY,
}


def _element(what: str, value: List[int]) -> tuple:
    if len(value) != 4:
        raise Failure(f"{what}: {len(value)} values, expected 4")
    return tuple(value)


def _rows(what: str, rows: List[List[int]]) -> List[tuple]:
    return [_element(f"{what}[{i}]", r) for i, r in enumerate(rows)]


def verify(v: Vector, _all: List[Vector]) -> None:
    c = v.case
    if v.kind == "constants":
        eq("s", _rows("s", c["s"]), list(ring.S))
        eq("s_inv", _rows("s_inv", c["s_inv"]), list(ring.S_INV))
        eq("m", _rows("m", c["m"]), list(ring.M))
        eq("evaluation_points", _rows("evaluation_points", c["evaluation_points"]), list(ring.EVALUATION_POINTS))
        eq("lagrange_at_zero", _rows("lagrange_at_zero", c["lagrange_at_zero"]), ring.lagrange_at_zero())
        _check_identities(_rows("s", c["s"]), _rows("s_inv", c["s_inv"]), _rows("m", c["m"]))
        return
    a = _element("a", c["a"])
    if v.kind == "inverse":
        expected = None if c["expected"] is None else _element("expected", c["expected"])
        eq("expected", ring.inverse(a), expected)
        if "non_unit" in v.flags:
            eq("non_unit flag: inverse", ring.inverse(a), None)
        return
    expected = _element("expected", c["expected"])
    if v.kind in ("add", "sub", "mul"):
        b = _element("b", c["b"])
        got = {"add": ring.add, "sub": ring.sub, "mul": ring.mul}[v.kind](a, b)
    elif v.kind == "mul_x":
        got = ring.mul_x(a)
    elif v.kind == "from_basis_a":
        got = ring.matvec(ring.S, a)
    elif v.kind == "to_basis_a":
        got = ring.matvec(ring.S_INV, a)
    else:
        got = ring.matvec(ring.M, a)
    eq("expected", got, expected)


def _check_identities(s: List[tuple], s_inv: List[tuple], m: List[tuple]) -> None:
    def matmul(p: List[tuple], q: List[tuple]) -> List[tuple]:
        return [tuple(sum(p[i][k] * q[k][j] for k in range(4)) & 0xFFFF for j in range(4)) for i in range(4)]

    identity = [tuple(int(i == j) for j in range(4)) for i in range(4)]
    eq("s times s_inv", matmul(s, s_inv), identity)
    s_t = [tuple(s[j][i] for j in range(4)) for i in range(4)]
    eq("s^T m s", matmul(matmul(s_t, m), s), identity)


SPEC = Spec("ring", CASES, verify)
