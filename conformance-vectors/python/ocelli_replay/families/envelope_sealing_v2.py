"""`envelope_sealing_v2`: version 2 envelopes from a seed: the share seed and the seeded
party, the shares it implies, X-Wing HPKE, digest, signature, wire form."""

from __future__ import annotations

import hashlib
from typing import Any, Dict, List

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ocelli_replay import envelope, ring, sharing, xwing
from ocelli_replay.check import eq, le16
from ocelli_replay.families.envelope_header import check_request
from ocelli_replay.families.shamir import _seed
from ocelli_replay.loader import Spec, Vector
from ocelli_replay.rng import ChaCha20Stream
from ocelli_replay.schema import TEMPLATE, ListOf

VERSION = 2
HEADER_DOMAIN = b"ocelli/envelope/v2"
INFO_DOMAIN = b"ocelli/payload/v2"

KEYS = {
    "node_seeds": ListOf("hex"),
    "node_public_keys": ListOf("hex"),
    "orb_secret_key": "hex",
    "orb_public_key": "hex",
}
CASES = {
    "seal": {
        "rng_seed": "hex",
        "request": envelope.REQUEST,
        "left": TEMPLATE,
        "right": TEMPLATE,
        "keys": KEYS,
        "seeded_party": "u8",
        "share_seed": "hex",
        "encapsulation_randomness": ListOf("hex"),
        "encapsulated_keys": ListOf("hex"),
        "payload_sha256": ListOf("hex"),
        "digest": "hex",
        "signature": "hex",
        "envelope": "hex",
    }
}


def header(request: Dict[str, Any], orb_public_key: bytes) -> bytes:
    v1 = envelope.header(request, orb_public_key)
    return HEADER_DOMAIN + VERSION.to_bytes(4, "big") + v1[len(envelope.HEADER_DOMAIN) + 4 :]


def seeded_party(request_id: bytes) -> int:
    return int.from_bytes(request_id, "big") % 3


def payload(party: int, request_id: bytes, body: bytes) -> bytes:
    return envelope.field_varint(1, VERSION) + envelope.field_varint(2, party) + envelope.field_bytes(3, request_id) + body


def seeded_shares(code: List[int], mask: List[int], seeded: int, keystream: ChaCha20Stream):
    """Each party's code and mask coefficients when `seeded`'s shares are the keystream."""
    inverse = ring.inverse(ring.EVALUATION_POINTS[seeded])
    assert inverse is not None
    out = []
    for coefs in (code, mask):
        parties: List[List[int]] = [[], [], []]
        for plain, y in zip(ring.elements(coefs), keystream.elements(len(coefs) // 4)):
            r = ring.mul(ring.sub(y, ring.matvec(ring.S, plain)), inverse)
            shares = sharing.share_element(plain, r)
            eq("the seeded party's share is its keystream", tuple(shares[seeded]), tuple(y))
            for p, share in enumerate(shares):
                parties[p].extend(share)
        out.append(parties)
    return out


def verify(v: Vector, _all: List[Vector]) -> None:
    xwing.self_check()
    c = v.case
    request, keys = c["request"], c["keys"]
    check_request(request)
    eq("keys.node_seeds: count", len(keys["node_seeds"]), 3)
    for p, seed in enumerate(keys["node_seeds"]):
        eq(f"keys.node_public_keys[{p}]", xwing.public_key(seed), keys["node_public_keys"][p])
    orb = Ed25519PrivateKey.from_private_bytes(keys["orb_secret_key"])
    eq("keys.orb_public_key", orb.public_key().public_bytes_raw(), keys["orb_public_key"])
    rid = request["request_id"]
    seeded = seeded_party(rid)
    eq("seeded_party", seeded, c["seeded_party"])
    stream = ChaCha20Stream(_seed(c["rng_seed"]))
    share_seed = stream.bytes(32)
    eq("share_seed", share_seed, c["share_seed"])
    keystream = ChaCha20Stream(share_seed)
    eyes = [seeded_shares(*sharing.plain_eye(c[e]["code"], c[e]["mask"]), seeded, keystream) for e in ("left", "right")]
    head = header(request, keys["orb_public_key"])
    sealed = []
    for p in range(3):
        eseed = stream.bytes(64)
        eq(f"encapsulation_randomness[{p}]", eseed, c["encapsulation_randomness"][p])
        if p == seeded:
            body = envelope.field_bytes(6, share_seed)
        else:
            left = envelope.eye_shares(le16(eyes[0][0][p]), le16(eyes[0][1][p]))
            right = envelope.eye_shares(le16(eyes[1][0][p]), le16(eyes[1][1][p]))
            body = envelope.field_bytes(4, left) + envelope.field_bytes(5, right)
        plaintext = payload(p, rid, body)
        eq(f"payload_sha256[{p}]", hashlib.sha256(plaintext).digest(), c["payload_sha256"][p])
        info = INFO_DOMAIN + bytes([p]) + rid
        enc, ct = xwing.seal(keys["node_public_keys"][p], info, head, plaintext, eseed)
        eq(f"encapsulated_keys[{p}]", enc, c["encapsulated_keys"][p])
        eq(f"party {p} opens its payload", xwing.open_(keys["node_seeds"][p], enc, info, head, ct), plaintext)
        sealed.append({"encapsulated_key": enc, "ciphertext": ct})
    digest = hashlib.sha256(envelope.digest_input(head, sealed, tag_only=True)).digest()
    eq("digest", digest, c["digest"])
    signature = orb.sign(digest)
    eq("signature", signature, c["signature"])
    wire = envelope.field_varint(1, VERSION) + envelope.envelope(
        request,
        keys["orb_public_key"],
        [envelope.sealed_payload(p, s["encapsulated_key"], s["ciphertext"]) for p, s in enumerate(sealed)],
        signature,
    )[len(envelope.field_varint(1, envelope.ENVELOPE_VERSION)) :]
    eq("envelope", wire, c["envelope"])


SPEC = Spec("envelope_sealing_v2", CASES, verify)
