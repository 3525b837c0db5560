"""`envelope_rejections_v2`: version 2 envelopes a node rejects, with the outcome of each stage
and the reason the node's intake gives under an envelope-version setting."""

from __future__ import annotations

import hashlib
from typing import Any, List, Optional, Tuple

from cryptography.exceptions import InvalidTag

from ocelli_replay import envelope, xwing
from ocelli_replay.check import eq
from ocelli_replay.ed25519 import verify_strict
from ocelli_replay.families.envelope_rejections import ACCEPT, OUTCOME, apply, check_file
from ocelli_replay.families.envelope_sealing_v2 import INFO_DOMAIN, KEYS, VERSION, header, seeded_party
from ocelli_replay.families.payload_rejections import party
from ocelli_replay.loader import Failure, Spec, Vector
from ocelli_replay.parse import CIPHERTEXT_LEN, MAX_ENVELOPE_LEN, Reader, Rejected, Rules, decode_payload, parse_envelope
from ocelli_replay.rng import ChaCha20Stream
from ocelli_replay.schema import ListOf, Opt

NODES = ("both", "v2_only", "v1_only")
CASES = {
    "base": {"request": envelope.REQUEST, "keys": KEYS, "envelope": "hex", "opened_sha256": ListOf("hex")},
    "reject": {
        "base": "u32",
        "length": "usize",
        "patches": ListOf({"offset": "usize", "bytes": "hex"}),
        "party": "u8",
        "node": "str",
        "parse": OUTCOME,
        "signature": Opt(OUTCOME),
        "open": Opt(OUTCOME),
        "intake": "str",
    },
}
SHARE_BYTES = 2 * (envelope.CODE_SHARE_BYTES + envelope.MASK_SHARE_BYTES)


def _seeded_payload_len(p: int) -> int:
    return len(
        envelope.field_varint(1, VERSION)
        + envelope.field_varint(2, p)
        + envelope.field_bytes(3, bytes(16))
        + envelope.field_bytes(6, bytes(32))
    )


def _ct_len(p: int, request_id: bytes) -> int:
    if p == seeded_party(request_id):
        return _seeded_payload_len(p) + envelope.TAG_BYTES
    return CIPHERTEXT_LEN[p]


HYBRID_ENC_BYTES = 1120
MAX_LEN_V2 = 157_330
V2 = Rules(VERSION, MAX_LEN_V2, HYBRID_ENC_BYTES, _ct_len)

Outcome = Tuple[str, Any]


def _open(data: bytes, p: int, keys: dict) -> Tuple[Outcome, Outcome, Outcome, Optional[dict]]:
    """The three stages, and the decoded payload when it opens."""
    try:
        e = parse_envelope(data, V2)
    except Rejected as r:
        return ("reject", r.as_vector()), None, None, None  # type: ignore[return-value]
    rid = e.request["request_id"]
    head = header(e.request, e.orb_key)
    sealed = [{"encapsulated_key": s.encapsulated_key, "ciphertext": s.ciphertext} for s in e.payloads]
    digest = hashlib.sha256(envelope.digest_input(head, sealed, tag_only=True)).digest()
    signature = ACCEPT if verify_strict(e.orb_key, digest, e.signature) else ("reject", ("signature", None))
    s = e.payloads[p]
    try:
        plaintext = xwing.open_(keys["node_seeds"][p], s.encapsulated_key, INFO_DOMAIN + bytes([p]) + rid, head, s.ciphertext)
    except (InvalidTag, ValueError):
        return ACCEPT, signature, ("reject", ("decryption", None)), None
    try:
        decoded = decode_payload(plaintext, p, rid, VERSION, seeded_party(rid) == p)
    except Rejected as r:
        return ACCEPT, signature, ("reject", r.as_vector()), None
    return ACCEPT, signature, ACCEPT, decoded


def stages(data: bytes, p: int, keys: dict) -> Tuple[Outcome, Optional[Outcome], Optional[Outcome]]:
    return _open(data, p, keys)[:3]


# The intake's reason for each error kind of the parser and the opening.
REASONS = {
    "malformed": "malformed",
    "missing_field": "malformed",
    "unsupported_version": "unsupported_version",
    "unknown_request_type": "invalid_request",
    "serial_id": "invalid_request",
    "payload_parties": "wrong_party",
    "payload_party": "wrong_party",
    "signature": "bad_signature",
    "decryption": "decryption_failed",
    "payload_request_id": "request_id_mismatch",
}
SHARE_FIELDS = ("left.code", "left.mask", "right.code", "right.mask")


def reason(error: Tuple[str, Any]) -> str:
    kind, fields = error
    if kind == "length":
        if fields["field"] == "envelope":
            return "oversized"
        return "bad_shares" if fields["field"] in SHARE_FIELDS else "bad_length"
    return REASONS[kind]


def version_field(data: bytes) -> Optional[int]:
    """The envelope's first field if it is field 1 as a varint, else None."""
    try:
        for number, v in Reader(data, 9, repeated=(8,)).fields():
            return v if number == 1 and isinstance(v, int) else None
    except Rejected:
        return None
    return None


def intake(data: bytes, p: int, node: str, keys: dict) -> str:
    if len(data) > MAX_ENVELOPE_LEN:
        return "oversized"
    version = version_field(data)
    if version != VERSION:
        if version == 1 and node == "v2_only":
            return "version1_refused"
        try:
            parse_envelope(data)
        except Rejected as r:
            return reason(r.as_vector())
        raise Failure("a version 1 envelope that parses is not in this family")
    if node == "v1_only":
        return "unsupported_version"
    parse, signature, opened = stages(data, p, keys)
    if parse != ACCEPT:
        return reason(parse[1])
    if parse_envelope(data, V2).orb_key != keys["orb_public_key"]:
        return "unknown_orb_key"
    for stage in (signature, opened):
        if stage != ACCEPT:
            return reason(stage[1])  # type: ignore[index]
    return "accept"


def opened_sha256(decoded: dict) -> bytes:
    if "seed" in decoded:
        return hashlib.sha256(ChaCha20Stream(decoded["seed"]).bytes(SHARE_BYTES)).digest()
    (lc, lm), (rc, rm) = decoded["left"], decoded["right"]
    return hashlib.sha256(lc + lm + rc + rm).digest()


def verify(v: Vector, vectors: List[Vector]) -> None:
    xwing.self_check()
    c = v.case
    if v.kind == "base":
        eq("keys.node_seeds: count", len(c["keys"]["node_seeds"]), 3)
        for p in range(3):
            eq(f"keys.node_public_keys[{p}]", xwing.public_key(c["keys"]["node_seeds"][p]), c["keys"]["node_public_keys"][p])
            parse, signature, opened, decoded = _open(c["envelope"], p, c["keys"])
            eq(f"party {p}", (parse, signature, opened), (ACCEPT, ACCEPT, ACCEPT))
            for node in ("both", "v2_only"):
                eq(f"party {p}, {node}: intake", intake(c["envelope"], p, node, c["keys"]), "accept")
            eq(f"opened_sha256[{p}]", opened_sha256(decoded), c["opened_sha256"][p])  # type: ignore[arg-type]
        eq("request", parse_envelope(c["envelope"], V2).request, c["request"])
        return
    if c["node"] not in NODES:
        raise Failure(f"node: {c['node']!r}, expected one of {', '.join(NODES)}")
    keys = vectors[c["base"] - 1].case["keys"]
    data = apply(vectors[c["base"] - 1].case["envelope"], c["length"], c["patches"])
    p = party(c["party"])
    got = stages(data, p, keys)
    eq("parse", got[0], c["parse"])
    eq("signature", got[1], c["signature"])
    eq("open", got[2], c["open"])
    eq("intake", intake(data, p, c["node"], keys), c["intake"])
    if "valid_signature" in v.flags:
        eq("valid_signature flag: signature", got[1], ACCEPT)


SPEC = Spec("envelope_rejections_v2", CASES, verify, check_file)
