"""MSB(x) on XOR-shared bit planes: the carry circuit of docs/conformance.md (`comparison`, step 4).

A shared value is three components (c0, c1, c2) of words; party p holds c_p ("own") and
c_{p-1} ("prev"). An AND round draws, per pair of operands, one u64 per word from each of the
three streams; party p's zero share is the XOR of the draws of its next and prev streams.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from ocelli_replay.rng import ChaChaStream

Shared = Tuple[List[int], List[int], List[int]]
RIPPLE_BLOCK = 4


def xor(x: Shared, y: Shared) -> Shared:
    return tuple([a ^ b for a, b in zip(xc, yc)] for xc, yc in zip(x, y))  # type: ignore[return-value]


def and_round(streams: Sequence[ChaChaStream], pairs: List[Tuple[Shared, Shared]]) -> List[Shared]:
    """One round of AND gates, the pairs in order."""
    out = []
    for x, y in pairs:
        w = len(x[0])
        draws = [s.u64s(w) for s in streams]
        z: List[List[int]] = []
        for p in range(3):
            q = (p - 1) % 3
            z.append(
                [
                    draws[p][i] ^ draws[q][i] ^ (x[p][i] & y[p][i]) ^ (x[p][i] & y[q][i]) ^ (x[q][i] & y[p][i])
                    for i in range(w)
                ]
            )
        out.append((z[0], z[1], z[2]))
    return out


def plane(x: Shared, w: int, j: int) -> Shared:
    return tuple(c[j * w : (j + 1) * w] for c in x)  # type: ignore[return-value]


def carry_into(streams: Sequence[ChaChaStream], a: Shared, b: Shared, w: int, top: int) -> Shared:
    blocks = [range(s, min(s + RIPPLE_BLOCK, top)) for s in range(0, top, RIPPLE_BLOCK)]
    ap = [plane(a, w, j) for j in range(top)]
    bp = [plane(b, w, j) for j in range(top)]
    carry: List[Optional[Shared]] = [None] * len(blocks)
    propagate: List[List[Shared]] = [[] if i == 0 else [xor(ap[j], bp[j]) for j in r] for i, r in enumerate(blocks)]
    step = 0
    while step < RIPPLE_BLOCK or any(len(f) > 1 for f in propagate):
        pairs: List[Tuple[Shared, Shared]] = []
        for r, c in zip(blocks, carry):
            j = r.start + step
            if j < r.stop:
                pairs.append((ap[j], bp[j]) if c is None else (xor(ap[j], c), xor(bp[j], c)))
        for factors in propagate:
            for k in range(0, len(factors) - 1, 2):
                pairs.append((factors[k], factors[k + 1]))
        if not pairs:
            break
        products = iter(and_round(streams, pairs))
        for i, r in enumerate(blocks):
            if r.start + step < r.stop:
                product = next(products)
                c = carry[i]
                carry[i] = product if c is None else xor(c, product)
        for i, factors in enumerate(propagate):
            odd = factors[-1:] if len(factors) % 2 else []
            propagate[i] = [next(products) for _ in range(len(factors) // 2)] + odd
        step += 1
    nodes: List[Tuple[Shared, Optional[Shared]]] = [(g, p[0] if p else None) for g, p in zip(carry, propagate)]  # type: ignore[misc]
    return group_generate(streams, nodes)


def group_generate(streams: Sequence[ChaChaStream], nodes: List[Tuple[Shared, Optional[Shared]]]) -> Shared:
    while len(nodes) > 1:
        pairs: List[Tuple[Shared, Shared]] = []
        for k in range(0, len(nodes) - 1, 2):
            lo, hi = nodes[k], nodes[k + 1]
            assert hi[1] is not None
            pairs.append((hi[1], lo[0]))
            if lo[1] is not None:
                pairs.append((hi[1], lo[1]))
        products = iter(and_round(streams, pairs))
        merged: List[Tuple[Shared, Optional[Shared]]] = []
        for k in range(0, len(nodes), 2):
            if k + 1 < len(nodes):
                lo, hi = nodes[k], nodes[k + 1]
                g = xor(hi[0], next(products))
                merged.append((g, next(products) if lo[1] is not None else None))
            else:
                merged.append(nodes[k])
        nodes = merged
    return nodes[0][0]


def to_planes(values: Sequence[int], bits: int, w: int) -> List[int]:
    words = [0] * (bits * w)
    for e, v in enumerate(values):
        for j in range(bits):
            if v >> j & 1:
                words[j * w + e // 64] |= 1 << (e % 64)
    return words
