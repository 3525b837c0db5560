"""`envelope_sealing`: whole envelopes from a seed: shares, HPKE, digest, signature, wire form."""

from __future__ import annotations

import hashlib
from typing import List

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from ocelli_replay import envelope, hpke, sharing
from ocelli_replay.check import eq, le16
from ocelli_replay.families.envelope_header import check_request
from ocelli_replay.families.shamir import _seed
from ocelli_replay.loader import Spec, Vector
from ocelli_replay.rng import ChaCha20Stream
from ocelli_replay.schema import TEMPLATE, ListOf

KEYS = {
    "node_secret_keys": ListOf("hex"),
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
        "share_randomness_bytes": "usize",
        "ephemeral_ikm": ListOf("hex"),
        "encapsulated_keys": ListOf("hex"),
        "payload_sha256": ListOf("hex"),
        "digest": "hex",
        "signature": "hex",
        "envelope": "hex",
    }
}


def check_keys(keys: dict) -> None:
    eq("keys.node_secret_keys: count", len(keys["node_secret_keys"]), 3)
    for p, sk in enumerate(keys["node_secret_keys"]):
        pk = hpke.public_bytes(X25519PrivateKey.from_private_bytes(sk))
        eq(f"keys.node_public_keys[{p}]", pk, keys["node_public_keys"][p])
    orb = Ed25519PrivateKey.from_private_bytes(keys["orb_secret_key"])
    eq("keys.orb_public_key", orb.public_key().public_bytes_raw(), keys["orb_public_key"])


def verify(v: Vector, _all: List[Vector]) -> None:
    c = v.case
    request, keys = c["request"], c["keys"]
    check_request(request)
    check_keys(keys)
    stream = ChaCha20Stream(_seed(c["rng_seed"]))
    eyes = [sharing.share_eye(c[e]["code"], c[e]["mask"], stream) for e in ("left", "right")]
    eq("share_randomness_bytes", 2 * 8 * (3200 + 1600), c["share_randomness_bytes"])
    head = envelope.header(request, keys["orb_public_key"])
    sealed = []
    for p in range(3):
        ikm = stream.bytes(32)
        eq(f"ephemeral_ikm[{p}]", ikm, c["ephemeral_ikm"][p])
        left = (le16(eyes[0][0][p]), le16(eyes[0][1][p]))
        right = (le16(eyes[1][0][p]), le16(eyes[1][1][p]))
        plaintext = envelope.payload(p, request["request_id"], left, right)
        eq(f"payload_sha256[{p}]", hashlib.sha256(plaintext).digest(), c["payload_sha256"][p])
        info = envelope.hpke_info(p, request["request_id"])
        enc, ct = hpke.seal(keys["node_public_keys"][p], info, head, plaintext, hpke.derive_key_pair(ikm))
        eq(f"encapsulated_keys[{p}]", enc, c["encapsulated_keys"][p])
        node = X25519PrivateKey.from_private_bytes(keys["node_secret_keys"][p])
        eq(f"party {p} opens its payload", hpke.open_(node, enc, info, head, ct), plaintext)
        sealed.append({"encapsulated_key": enc, "ciphertext": ct})
    digest = hashlib.sha256(envelope.digest_input(head, sealed)).digest()
    eq("digest", digest, c["digest"])
    signature = Ed25519PrivateKey.from_private_bytes(keys["orb_secret_key"]).sign(digest)
    eq("signature", signature, c["signature"])
    wire = envelope.envelope(
        request,
        keys["orb_public_key"],
        [envelope.sealed_payload(p, s["encapsulated_key"], s["ciphertext"]) for p, s in enumerate(sealed)],
        signature,
    )
    eq("envelope", wire, c["envelope"])
    eq("envelope: length", len(wire), envelope.envelope_len(request, keys["orb_public_key"]))


SPEC = Spec("envelope_sealing", CASES, verify)
