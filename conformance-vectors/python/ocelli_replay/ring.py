"""GR(2^16, 4) = Z_{2^16}[x] / (x^4 - x - 1) and its constants (docs/design.md, section 4)."""

from __future__ import annotations

from typing import List, Sequence, Tuple

Element = Tuple[int, int, int, int]
MASK = 0xFFFF

S = ((1, 0, 0, 0), (58082, 1, 0, 0), (60579, 25194, 1, 0), (17325, 51956, 57011, 1))
S_INV = ((1, 0, 0, 0), (7454, 1, 0, 0), (35057, 40342, 1, 0), (37176, 61738, 8525, 1))
M = (
    (16038, 45700, 28361, 37176),
    (45700, 28361, 37176, 61738),
    (28361, 37176, 61738, 8525),
    (37176, 61738, 8525, 1),
)
ZERO: Element = (0, 0, 0, 0)
ONE: Element = (1, 0, 0, 0)
X: Element = (0, 1, 0, 0)
EVALUATION_POINTS: Tuple[Element, Element, Element] = (ONE, X, (1, 1, 0, 0))
UNIT_GROUP_ORDER = 15 * 2**60


def add(a: Sequence[int], b: Sequence[int]) -> Element:
    return tuple((x + y) & MASK for x, y in zip(a, b))  # type: ignore[return-value]


def sub(a: Sequence[int], b: Sequence[int]) -> Element:
    return tuple((x - y) & MASK for x, y in zip(a, b))  # type: ignore[return-value]


def neg(a: Sequence[int]) -> Element:
    return tuple(-x & MASK for x in a)  # type: ignore[return-value]


def mul(a: Sequence[int], b: Sequence[int]) -> Element:
    a0, a1, a2, a3 = a
    b0, b1, b2, b3 = b
    c0 = a0 * b0
    c1 = a0 * b1 + a1 * b0
    c2 = a0 * b2 + a1 * b1 + a2 * b0
    c3 = a0 * b3 + a1 * b2 + a2 * b1 + a3 * b0
    c4 = a1 * b3 + a2 * b2 + a3 * b1
    c5 = a2 * b3 + a3 * b2
    c6 = a3 * b3
    # x^4 = x + 1, x^5 = x^2 + x, x^6 = x^3 + x^2
    return (
        (c0 + c4) & MASK,
        (c1 + c4 + c5) & MASK,
        (c2 + c5 + c6) & MASK,
        (c3 + c6) & MASK,
    )


def mul_x(a: Sequence[int]) -> Element:
    return mul(a, X)


def is_unit(a: Sequence[int]) -> bool:
    return any(c & 1 for c in a)


def power(a: Sequence[int], e: int) -> Element:
    result: Element = ONE
    base: Element = tuple(a)  # type: ignore[assignment]
    while e:
        if e & 1:
            result = mul(result, base)
        base = mul(base, base)
        e >>= 1
    return result


def inverse(a: Sequence[int]) -> "Element | None":
    if not is_unit(a):
        return None
    return power(a, UNIT_GROUP_ORDER - 1)


def matvec(m: Sequence[Sequence[int]], v: Sequence[int]) -> Element:
    return tuple(sum(r * x for r, x in zip(row, v)) & MASK for row in m)  # type: ignore[return-value]


def lagrange_at_zero() -> List[Element]:
    """Degree-2 Lagrange coefficients at 0 for the three evaluation points."""
    out = []
    for i, ai in enumerate(EVALUATION_POINTS):
        acc: Element = ONE
        for j, aj in enumerate(EVALUATION_POINTS):
            if i != j:
                inv = inverse(sub(aj, ai))
                assert inv is not None
                acc = mul(acc, mul(aj, inv))
        out.append(acc)
    return out


def elements(coefs: Sequence[int]) -> List[Element]:
    return [tuple(coefs[i : i + 4]) for i in range(0, len(coefs), 4)]  # type: ignore[misc]


def flatten(elems: Sequence[Sequence[int]]) -> List[int]:
    return [c for e in elems for c in e]
