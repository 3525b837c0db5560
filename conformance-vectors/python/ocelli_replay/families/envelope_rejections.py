"""`envelope_rejections`: envelopes a node rejects, with the outcome of each stage."""

from __future__ import annotations

import hashlib
from typing import Any, List, Optional, Tuple

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from ocelli_replay import envelope, hpke
from ocelli_replay.check import eq
from ocelli_replay.ed25519 import verify_strict
from ocelli_replay.families.envelope_sealing import KEYS, check_keys
from ocelli_replay.families.payload_rejections import ERROR, party
from ocelli_replay.loader import Failure, Spec, Vector
from ocelli_replay.parse import Envelope, Rejected, decode_payload, parse_envelope
from ocelli_replay.schema import ListOf, LoadError, Opt, Tagged

OUTCOME = Tagged(units=("accept",), variants={"reject": ERROR})
CASES = {
    "base": {"request": envelope.REQUEST, "keys": KEYS, "envelope": "hex"},
    "reject": {
        "base": "u32",
        "length": "usize",
        "patches": ListOf({"offset": "usize", "bytes": "hex"}),
        "party": "u8",
        "parse": OUTCOME,
        "signature": Opt(OUTCOME),
        "open": Opt(OUTCOME),
    },
}
ACCEPT: Tuple[str, Any] = ("accept", None)


def digest(e: Envelope) -> bytes:
    sealed = [{"encapsulated_key": p.encapsulated_key, "ciphertext": p.ciphertext} for p in e.payloads]
    return hashlib.sha256(envelope.digest_input(e.header(), sealed)).digest()


def _reject(e: Rejected) -> Tuple[str, Any]:
    return ("reject", e.as_vector())


def stages(data: bytes, p: int, keys: dict) -> Tuple[Tuple[str, Any], Optional[Tuple[str, Any]], Optional[Tuple[str, Any]]]:
    try:
        e = parse_envelope(data)
    except Rejected as r:
        return _reject(r), None, None
    signature = ACCEPT if verify_strict(e.orb_key, digest(e), e.signature) else ("reject", ("signature", None))
    sealed = e.payloads[p]
    node = X25519PrivateKey.from_private_bytes(keys["node_secret_keys"][p])
    try:
        plaintext = hpke.open_(
            node, sealed.encapsulated_key, envelope.hpke_info(p, e.request["request_id"]), e.header(), sealed.ciphertext
        )
    except (InvalidTag, ValueError):
        return ACCEPT, signature, ("reject", ("decryption", None))
    try:
        decode_payload(plaintext, p, e.request["request_id"])
    except Rejected as r:
        return ACCEPT, signature, _reject(r)
    return ACCEPT, signature, ACCEPT


def apply(base: bytes, length: int, patches: List[dict]) -> bytes:
    out = bytearray(base[:length].ljust(length, b"\0"))
    for patch in patches:
        end = patch["offset"] + len(patch["bytes"])
        if end > length:
            raise Failure(f"patches: the patch at {patch['offset']} runs past the length {length}")
        out[patch["offset"] : end] = patch["bytes"]
    return bytes(out)


def check_file(vectors: List[Vector]) -> None:
    for v in vectors:
        if v.kind == "reject":
            b = v.case["base"]
            if not 1 <= b <= len(vectors) or vectors[b - 1].kind != "base":
                raise LoadError(f"vector {v.id}: base {b} is not a base vector of this file")


def verify(v: Vector, vectors: List[Vector]) -> None:
    c = v.case
    if v.kind == "base":
        check_keys(c["keys"])
        for p in range(3):
            eq(f"party {p}", stages(c["envelope"], p, c["keys"]), (ACCEPT, ACCEPT, ACCEPT))
        eq("request", parse_envelope(c["envelope"]).request, c["request"])
        return
    base = vectors[c["base"] - 1].case
    data = apply(base["envelope"], c["length"], c["patches"])
    got = stages(data, party(c["party"]), base["keys"])
    eq("parse", got[0], c["parse"])
    eq("signature", got[1], c["signature"])
    eq("open", got[2], c["open"])
    if "valid_signature" in v.flags:
        eq("valid_signature flag: signature", got[1], ACCEPT)


SPEC = Spec("envelope_rejections", CASES, verify, check_file)
