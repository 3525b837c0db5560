"""`requests`: each request's outcome, by the matching rules of docs/conformance.md, in the clear.

The outcomes do not depend on the share randomness or the PRF seeds, so this replays the rules
on the plaintext templates: an eye matches when some rotation k in -15..=15 of the request's
template has 2^16 cd > A md against the enrolled one.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from ocelli_replay import iris
from ocelli_replay.check import eq
from ocelli_replay.envelope import REQUEST_TYPES
from ocelli_replay.loader import Failure, Spec, Vector
from ocelli_replay.schema import TEMPLATE, ListOf, LoadError, Tagged

PERSON = {"serial_id": "u64", "left": TEMPLATE, "right": TEMPLATE, "share_seed": "hex"}
REQUEST = {
    "request_type": "str",
    "serial_id": "u64",
    "or_policy": "bool",
    "left": TEMPLATE,
    "right": TEMPLATE,
    "share_seed": "hex",
}
OUTCOME = Tagged(
    units=("unique", "apply"),
    variants={"match": {"entries": ListOf("u64"), "earlier": ListOf("usize")}, "reauth": "bool"},
)
CASES = {
    "database": {"people": ListOf(PERSON)},
    "batch": {
        "database": "u32",
        "threshold_a": "u32",
        "privacy_max": "bool",
        "prf_seeds": ListOf("hex"),
        "requests": ListOf(REQUEST),
        "outcomes": ListOf(OUTCOME),
    },
}

Eye = Tuple[int, int]


def _as_int(bits: List[int]) -> int:
    return int("".join(map(str, bits)), 2)


def eye(template: Dict[str, bytes], what: str) -> Eye:
    return (_as_int(iris.unpack(template["code"], f"{what}.code")), _as_int(iris.unpack(template["mask"], f"{what}.mask")))


ROW_MASK = (1 << iris.ROW_BITS) - 1


def rotate_int(bits: int, k: int) -> int:
    """numpy.roll by k columns of a 12,800-bit template held as an integer (bit 0 first = most significant)."""
    s = (k % iris.COLUMNS) * iris.BITS_PER_COLUMN
    out = 0
    for r in range(iris.ROWS):
        shift = (iris.ROWS - 1 - r) * iris.ROW_BITS
        row = (bits >> shift) & ROW_MASK
        out |= (((row >> s) | (row << (iris.ROW_BITS - s))) & ROW_MASK) << shift
    return out


def rotations(template: Dict[str, bytes], what: str) -> List[Eye]:
    code, mask = eye(template, what)
    return [(rotate_int(code, k), rotate_int(mask, k)) for k in range(-iris.MAX_ROTATION, iris.MAX_ROTATION + 1)]


def eye_matches(query: List[Eye], entry: Eye, a: int) -> bool:
    for qc, qm in query:
        common = qm & entry[1]
        md = bin(common).count("1")
        cd = md - 2 * bin((qc ^ entry[0]) & common).count("1")
        if 65536 * cd > a * md:
            return True
    return False


def person_matches(query: Tuple[List[Eye], List[Eye]], entry: Tuple[Eye, Eye], a: int, or_policy: bool) -> bool:
    left = eye_matches(query[0], entry[0], a)
    right = eye_matches(query[1], entry[1], a)
    return (left or right) if or_policy else (left and right)


def check_file(vectors: List[Vector]) -> None:
    for v in vectors:
        if v.kind == "batch":
            d = v.case["database"]
            if not 1 <= d <= len(vectors) or vectors[d - 1].kind != "database":
                raise LoadError(f"vector {v.id}: database {d} is not a database vector of this file")


def verify(v: Vector, vectors: List[Vector]) -> None:
    c = v.case
    if v.kind == "database":
        for i, person in enumerate(c["people"]):
            eq(f"people[{i}].share_seed: bytes", len(person["share_seed"]), 32)
        ids = [p["serial_id"] for p in c["people"]]
        eq("people: serial ids increasing", ids == sorted(set(ids)), True)
        return
    db = {p["serial_id"]: (eye(p["left"], "left"), eye(p["right"], "right")) for p in vectors[c["database"] - 1].case["people"]}
    a = c["threshold_a"]
    eq("prf_seeds: count", len(c["prf_seeds"]), 3)
    for i, seed in enumerate(c["prf_seeds"]):
        eq(f"prf_seeds[{i}]: bytes", len(seed), 32)
    for i, r in enumerate(c["requests"]):
        eq(f"requests[{i}].share_seed: bytes", len(r["share_seed"]), 32)
    eq("outcomes: count", len(c["outcomes"]), len(c["requests"]))
    candidates: List[Tuple[int, Tuple[Eye, Eye]]] = []
    for i, r in enumerate(c["requests"]):
        kind = r["request_type"]
        if kind not in REQUEST_TYPES:
            raise Failure(f"requests[{i}].request_type: unknown type {kind!r}")
        query = (rotations(r["left"], f"requests[{i}].left"), rotations(r["right"], f"requests[{i}].right"))
        plain = (eye(r["left"], "left"), eye(r["right"], "right"))
        got: Any
        if kind in ("uniqueness", "uniqueness_check"):
            entries = [s for s, e in sorted(db.items()) if person_matches(query, e, a, r["or_policy"])]
            earlier = [j for j, e in candidates if person_matches(query, e, a, r["or_policy"])]
            if not entries and not earlier:
                got = ("unique", None)
            elif c["privacy_max"]:
                got = ("match", {"entries": [], "earlier": []})
            else:
                got = ("match", {"entries": entries, "earlier": earlier})
            if kind == "uniqueness":
                candidates.append((i, plain))
        elif kind == "reauth":
            entry = db.get(r["serial_id"])
            got = ("reauth", entry is not None and person_matches(query, entry, a, r["or_policy"]))
        else:
            got = ("apply", None)
        eq(f"outcomes[{i}] ({kind})", got, c["outcomes"][i])
    if "intra_batch" in v.flags:
        eq("intra_batch flag: some request matches an earlier one", any(
            o[0] == "match" and o[1]["earlier"] for o in c["outcomes"]) or c["privacy_max"], True)


SPEC = Spec("requests", CASES, verify, check_file)
