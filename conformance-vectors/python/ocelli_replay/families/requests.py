"""`requests`: each request's comparisons and outcome, by the matching rules of docs/conformance.md, in the clear.

The outcomes do not depend on the share randomness or the PRF seeds (which the vectors derive
from their ids rather than store), so this replays the rules on the plaintext templates: for
each rotation k in -15..=15 of the request's template, x_k = A md_k - 2^16 cd_k against the
other template, and an eye matches when some x_k < 0 (2^16 cd > A md).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ocelli_replay import iris
from ocelli_replay.check import eq
from ocelli_replay.envelope import REQUEST_TYPES
from ocelli_replay.loader import Failure, Spec, Vector
from ocelli_replay.schema import TEMPLATE, ListOf, LoadError, Opt, Tagged

PERSON = {"serial_id": "u64", "left": TEMPLATE, "right": TEMPLATE}
REQUEST = {
    "request_type": "str",
    "serial_id": "u64",
    "or_policy": "bool",
    "left": Opt(TEMPLATE),
    "right": Opt(TEMPLATE),
}
COMPARISON = {"with": Tagged(units=(), variants={"entry": "u64", "request": "usize"}), "left": "u32hex", "right": "u32hex"}
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
        "requests": ListOf(REQUEST),
        "comparisons": ListOf(ListOf(COMPARISON)),
        "outcomes": ListOf(OUTCOME),
    },
}

Eye = Tuple[int, int]
Person = Tuple[Eye, Eye]


def _as_int(bits: List[int]) -> int:
    return int("".join(map(str, bits)), 2)


def eye(template: Dict[str, bytes], what: str) -> Eye:
    """Code and mask as integers (bit 0 most significant); code bits must be 0 where the mask is."""
    code = _as_int(iris.unpack(template["code"], f"{what}.code"))
    mask = _as_int(iris.unpack(template["mask"], f"{what}.mask"))
    stray = code & ~mask
    if stray:
        raise Failure(f"{what}.code: bit {iris.CODE_BITS - stray.bit_length()} is 1 where the mask is 0 (must be 0)")
    return code, mask


def person(p: Dict[str, Any], what: str) -> Person:
    return eye(p["left"], f"{what}.left"), eye(p["right"], f"{what}.right")


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


def rotations(e: Eye) -> List[Eye]:
    return [(rotate_int(e[0], k), rotate_int(e[1], k)) for k in range(-iris.MAX_ROTATION, iris.MAX_ROTATION + 1)]


def compare_eye(query: List[Eye], other: Eye, a: int) -> Tuple[List[int], bool]:
    """x_k = A md_k - 2^16 cd_k per rotation (as u32), and whether some rotation has 2^16 cd > A md."""
    xs, matches = [], False
    for qc, qm in query:
        common = qm & other[1]
        md = bin(common).count("1")
        cd = md - 2 * bin((qc ^ other[0]) & common).count("1")
        xs.append((a * md - 65536 * cd) & 0xFFFF_FFFF)
        matches |= 65536 * cd > a * md
    return xs, matches


def check_file(vectors: List[Vector]) -> None:
    for v in vectors:
        if v.kind == "batch":
            d = v.case["database"]
            if not 1 <= d <= len(vectors) or vectors[d - 1].kind != "database":
                raise LoadError(f"vector {v.id}: database {d} is not a database vector of this file")


def _outcome(kind: str, matched: List[Tuple[Tuple[str, int], bool, bool]], or_policy: bool, privacy_max: bool) -> Any:
    hits = [w for w, left, right in matched if ((left or right) if or_policy else (left and right))]
    if kind in ("uniqueness", "uniqueness_check"):
        entries = [n for tag, n in hits if tag == "entry"]
        earlier = [n for tag, n in hits if tag == "request"]
        if not hits:
            return ("unique", None)
        if privacy_max:
            return ("match", {"entries": [], "earlier": []})
        return ("match", {"entries": entries, "earlier": earlier})
    if kind == "reauth":
        return ("reauth", bool(hits))
    return ("apply", None)


def verify(v: Vector, vectors: List[Vector]) -> None:
    c = v.case
    if v.kind == "database":
        people = [person(p, f"people[{i}]") for i, p in enumerate(c["people"])]
        ids = [p["serial_id"] for p in c["people"]]
        eq("people: serial ids positive and increasing", bool(people) and ids == sorted(set(ids)) and ids[0] > 0, True)
        return
    entries = [(p["serial_id"], person(p, f"database people[{i}]")) for i, p in enumerate(vectors[c["database"] - 1].case["people"])]
    a = c["threshold_a"]
    if a > 65536:
        raise Failure(f"threshold_a: {a}, above 2^16")
    eq("comparisons: lists", len(c["comparisons"]), len(c["requests"]))
    eq("outcomes: count", len(c["outcomes"]), len(c["requests"]))
    queries: List[Optional[Person]] = []
    intra_batch = False
    for i, r in enumerate(c["requests"]):
        kind = r["request_type"]
        if kind not in REQUEST_TYPES:
            raise Failure(f"requests[{i}].request_type: unknown type {kind!r}")
        if (r["serial_id"] != 0) != (kind not in ("uniqueness", "uniqueness_check")):
            raise Failure(f"requests[{i}].serial_id: {r['serial_id']} for a {kind} request (set exactly for deletion, reauth and reset)")
        # Whom it is compared with: (tag, id) and the other person.
        others: List[Tuple[Tuple[str, int], Person]] = []
        if kind in ("uniqueness", "uniqueness_check"):
            others = [(("entry", s), e) for s, e in entries]
            others += [(("request", j), q) for j, q in enumerate(queries) if q is not None and c["requests"][j]["request_type"] == "uniqueness"]
        elif kind == "reauth":
            others = [(("entry", s), e) for s, e in entries if s == r["serial_id"]]
        has_template = (r["left"] is not None, r["right"] is not None)
        if has_template != (bool(others),) * 2:
            raise Failure(f"requests[{i}].left, right: templates must be present exactly when the request is compared with someone")
        plain = person(r, f"requests[{i}]") if others else None
        queries.append(plain)
        recorded = c["comparisons"][i]
        eq(f"comparisons[{i}]: count", len(recorded), len(others))
        matched = []
        if plain is not None:
            query = (rotations(plain[0]), rotations(plain[1]))
            for n, (with_, other) in enumerate(others):
                eq(f"comparisons[{i}][{n}].with", with_, recorded[n]["with"])
                left, lm = compare_eye(query[0], other[0], a)
                right, rm = compare_eye(query[1], other[1], a)
                eq(f"comparisons[{i}][{n}].left", left, recorded[n]["left"])
                eq(f"comparisons[{i}][{n}].right", right, recorded[n]["right"])
                matched.append((with_, lm, rm))
        got = _outcome(kind, matched, r["or_policy"], c["privacy_max"])
        if r["or_policy"] and got == _outcome(kind, matched, False, c["privacy_max"]):
            raise Failure(f"requests[{i}].or_policy: true, but the outcome is the same under the AND policy (must be false)")
        eq(f"outcomes[{i}] ({kind})", got, c["outcomes"][i])
        intra_batch |= any(w[0] == "request" and ((lm or rm) if r["or_policy"] else (lm and rm)) for w, lm, rm in matched)
    eq("intra_batch flag: some request matches an earlier one", "intra_batch" in v.flags, intra_batch)


SPEC = Spec("requests", CASES, verify, check_file)
