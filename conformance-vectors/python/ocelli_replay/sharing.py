"""Shamir sharing of one eye, and the node's query preprocessing (docs/design.md, section 4)."""

from __future__ import annotations

from typing import List, Sequence, Tuple

from ocelli_replay import iris, ring
from ocelli_replay.rng import ChaCha20Stream

PARTIES = 3


def share_element(plain: Sequence[int], r: Sequence[int]) -> List[ring.Element]:
    s = ring.matvec(ring.S, plain)
    return [ring.add(s, ring.mul(r, alpha)) for alpha in ring.EVALUATION_POINTS]


def share_coefs(coefs: Sequence[int], randomness: Sequence[Sequence[int]]) -> List[List[int]]:
    """Each party's coefficients for the plain coefficients `coefs`, four per element."""
    out: List[List[int]] = [[], [], []]
    for e, r in zip(ring.elements(coefs), randomness):
        for p, share in enumerate(share_element(e, r)):
            out[p].extend(share)
    return out


def plain_eye(code_packed: bytes, mask_packed: bytes) -> Tuple[List[int], List[int]]:
    code, mask = iris.unpack(code_packed, "code"), iris.unpack(mask_packed, "mask")
    return iris.code_coefs(code, mask), iris.trimmed_mask_coefs(mask)


def share_eye(
    code_packed: bytes, mask_packed: bytes, stream: ChaCha20Stream
) -> Tuple[List[List[int]], List[List[int]]]:
    code, mask = plain_eye(code_packed, mask_packed)
    code_r = stream.elements(len(code) // 4)
    mask_r = stream.elements(len(mask) // 4)
    return share_coefs(code, code_r), share_coefs(mask, mask_r)


def reconstruct(i: int, j: int, fi: Sequence[int], fj: Sequence[int]) -> List[int]:
    """The plain (basis A) coefficients from the shares of parties i and j."""
    ai, aj = ring.EVALUATION_POINTS[i], ring.EVALUATION_POINTS[j]
    inv = ring.inverse(ring.sub(ai, aj))
    assert inv is not None
    out: List[int] = []
    for ei, ej in zip(ring.elements(fi), ring.elements(fj)):
        r = ring.mul(ring.sub(ei, ej), inv)
        s = ring.sub(ei, ring.mul(r, ai))
        out.extend(ring.matvec(ring.S_INV, s))
    return out


LAGRANGE = ring.lagrange_at_zero()


def preprocess_element(party: int, e: Sequence[int]) -> ring.Element:
    return ring.matvec(ring.M, ring.mul(LAGRANGE[party], e))


def preprocess(party: int, coefs: Sequence[int]) -> List[int]:
    return ring.flatten(preprocess_element(party, e) for e in ring.elements(coefs))
