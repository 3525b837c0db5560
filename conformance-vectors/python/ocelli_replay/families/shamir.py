"""`shamir`: shares for given randomness, whole eyes from a seed, reconstruction."""

from __future__ import annotations

from typing import List

from ocelli_replay import ring, sharing
from ocelli_replay.check import digest16, eq
from ocelli_replay.loader import Failure, Spec, Vector
from ocelli_replay.rng import ChaCha20Stream
from ocelli_replay.schema import DIGEST16, ELEMENT, TEMPLATE, ListOf

CASES = {
    "element": {"plain": ELEMENT, "randomness": ELEMENT, "shares": ListOf(ELEMENT)},
    "eye": {
        "template": TEMPLATE,
        "rng_seed": "hex",
        "plain_code": DIGEST16,
        "plain_mask": DIGEST16,
        "code_shares": ListOf(DIGEST16),
        "mask_shares": ListOf(DIGEST16),
    },
}


def _seed(value: bytes) -> bytes:
    if len(value) != 32:
        raise Failure(f"rng_seed: {len(value)} bytes, expected 32")
    return value


def verify(v: Vector, _all: List[Vector]) -> None:
    c = v.case
    if v.kind == "element":
        shares = sharing.share_element(c["plain"], c["randomness"])
        eq("shares: count", len(c["shares"]), sharing.PARTIES)
        for p in range(sharing.PARTIES):
            eq(f"shares[{p}]", list(shares[p]), c["shares"][p])
        if "zero_randomness" in v.flags:
            eq("zero_randomness flag: randomness", c["randomness"], [0, 0, 0, 0])
            eq("zero_randomness flag: share 0 = S a", shares[0], ring.matvec(ring.S, c["plain"]))
        for i in range(3):
            for j in range(i + 1, 3):
                eq(f"reconstruction from parties {i} and {j}", sharing.reconstruct(i, j, shares[i], shares[j]), c["plain"])
        return
    t = c["template"]
    code, mask = sharing.plain_eye(t["code"], t["mask"])
    digest16("plain_code", code, c["plain_code"])
    digest16("plain_mask", mask, c["plain_mask"])
    code_shares, mask_shares = sharing.share_eye(t["code"], t["mask"], ChaCha20Stream(_seed(c["rng_seed"])))
    eq("code_shares: count", len(c["code_shares"]), 3)
    eq("mask_shares: count", len(c["mask_shares"]), 3)
    for p in range(3):
        digest16(f"code_shares[{p}]", code_shares[p], c["code_shares"][p])
        digest16(f"mask_shares[{p}]", mask_shares[p], c["mask_shares"][p])
    for i, j in ((0, 1), (0, 2), (1, 2)):
        eq(f"code from parties {i} and {j}", sharing.reconstruct(i, j, code_shares[i], code_shares[j]), code)
        eq(f"mask from parties {i} and {j}", sharing.reconstruct(i, j, mask_shares[i], mask_shares[j]), mask)


SPEC = Spec("shamir", CASES, verify)
