"""`dot_shares`: each party's additive cd/md shares for a rotated query against an entry."""

from __future__ import annotations

from typing import List

from ocelli_replay import iris, sharing
from ocelli_replay.check import eq
from ocelli_replay.families.masked_bitvectors import score
from ocelli_replay.families.shamir import _seed
from ocelli_replay.loader import Spec, Vector
from ocelli_replay.rng import ChaCha20Stream
from ocelli_replay.schema import TEMPLATE, ListOf

CASES = {
    "pair": {
        "query": TEMPLATE,
        "query_rng_seed": "hex",
        "entry": TEMPLATE,
        "entry_rng_seed": "hex",
        "rotation": "i32",
        "party_shares": ListOf(ListOf("u16")),
        "cd": "u16",
        "md": "u16",
        "plain_cd": "i32",
        "plain_md": "u32",
    }
}


def verify(v: Vector, _all: List[Vector]) -> None:
    c = v.case
    q, e, k = c["query"], c["entry"], c["rotation"]
    q_code, q_mask = sharing.share_eye(q["code"], q["mask"], ChaCha20Stream(_seed(c["query_rng_seed"])))
    e_code, e_mask = sharing.share_eye(e["code"], e["mask"], ChaCha20Stream(_seed(c["entry_rng_seed"])))
    eq("party_shares: count", len(c["party_shares"]), 3)
    total_cd = total_md = 0
    for p in range(3):
        qc = iris.rotate_coefs(sharing.preprocess(p, q_code[p]), k)
        qm = iris.rotate_coefs(sharing.preprocess(p, q_mask[p]), k)
        cd = sum(x * y for x, y in zip(e_code[p], qc)) & 0xFFFF
        md = 2 * sum(x * y for x, y in zip(e_mask[p], qm)) & 0xFFFF
        eq(f"party_shares[{p}]", [cd, md], c["party_shares"][p])
        total_cd, total_md = total_cd + cd, total_md + md
    eq("cd", total_cd & 0xFFFF, c["cd"])
    eq("md", total_md & 0xFFFF, c["md"])
    qb = [iris.unpack(q["code"], "query.code"), iris.unpack(q["mask"], "query.mask")]
    eb = [iris.unpack(e["code"], "entry.code"), iris.unpack(e["mask"], "entry.mask")]
    plain = score(iris.rotate_bits(qb[0], k), iris.rotate_bits(qb[1], k), eb[0], eb[1], 0)
    eq("plain_cd", plain["cd"], c["plain_cd"])
    eq("plain_md", plain["md"], c["plain_md"])
    eq("cd = plain_cd mod 2^16", c["plain_cd"] & 0xFFFF, c["cd"])
    eq("md = plain_md mod 2^16", c["plain_md"] & 0xFFFF, c["md"])


SPEC = Spec("dot_shares", CASES, verify)
