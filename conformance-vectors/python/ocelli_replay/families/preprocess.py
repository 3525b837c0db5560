"""`preprocess`: Lagrange multiplication and basis-B conversion per party."""

from __future__ import annotations

from typing import List

from ocelli_replay import sharing
from ocelli_replay.check import digest16, eq
from ocelli_replay.families.shamir import _seed
from ocelli_replay.loader import Failure, Spec, Vector
from ocelli_replay.rng import ChaCha20Stream
from ocelli_replay.schema import DIGEST16, ELEMENT, TEMPLATE, ListOf

CASES = {
    "element": {"party": "u8", "share": ELEMENT, "expected": ELEMENT},
    "eye": {"template": TEMPLATE, "rng_seed": "hex", "code": ListOf(DIGEST16), "mask": ListOf(DIGEST16)},
}


def verify(v: Vector, _all: List[Vector]) -> None:
    c = v.case
    if v.kind == "element":
        if c["party"] > 2:
            raise Failure(f"party: {c['party']} is not 0, 1 or 2")
        eq("expected", list(sharing.preprocess_element(c["party"], c["share"])), c["expected"])
        return
    t = c["template"]
    code_shares, mask_shares = sharing.share_eye(t["code"], t["mask"], ChaCha20Stream(_seed(c["rng_seed"])))
    eq("code: count", len(c["code"]), 3)
    eq("mask: count", len(c["mask"]), 3)
    for p in range(3):
        digest16(f"code[{p}]", sharing.preprocess(p, code_shares[p]), c["code"][p])
        digest16(f"mask[{p}]", sharing.preprocess(p, mask_shares[p]), c["mask"][p])


SPEC = Spec("preprocess", CASES, verify)
