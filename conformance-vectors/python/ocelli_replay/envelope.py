"""The envelope's header, HPKE info strings and protobuf wire form (docs/design.md, section 5)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

ENVELOPE_VERSION = 1
PAYLOAD_VERSION = 1
HEADER_DOMAIN = b"ocelli/envelope/v1"
INFO_DOMAIN = b"ocelli/payload/v1"
REQUEST_TYPES = {"uniqueness": 1, "uniqueness_check": 2, "deletion": 3, "reauth": 4, "reset": 5}
CODE_SHARE_BYTES = 25_600
MASK_SHARE_BYTES = 12_800
TAG_BYTES = 16
KEY_BYTES = 32
SIGNATURE_BYTES = 64

REQUEST = {
    "request_id": "hex",
    "request_type": "str",
    "timestamp_ms": "u64",
    "serial_id": "u64",
    "or_policy": "bool",
}


def header(request: Dict[str, Any], orb_public_key: bytes) -> bytes:
    return b"".join(
        [
            HEADER_DOMAIN,
            ENVELOPE_VERSION.to_bytes(4, "big"),
            request["request_id"],
            bytes([REQUEST_TYPES[request["request_type"]]]),
            request["timestamp_ms"].to_bytes(8, "big"),
            request["serial_id"].to_bytes(8, "big"),
            bytes([int(request["or_policy"])]),
            orb_public_key,
        ]
    )


def hpke_info(party: int, request_id: bytes) -> bytes:
    return INFO_DOMAIN + bytes([party]) + request_id


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value) if value else b""


def field_bytes(number: int, value: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(value)) + value if value else b""


def eye_shares(code: bytes, mask: bytes) -> bytes:
    return field_bytes(1, code) + field_bytes(2, mask)


def payload(party: int, request_id: bytes, left: Sequence[bytes], right: Sequence[bytes]) -> bytes:
    return (
        field_varint(1, PAYLOAD_VERSION)
        + field_varint(2, party)
        + field_bytes(3, request_id)
        + field_bytes(4, eye_shares(*left))
        + field_bytes(5, eye_shares(*right))
    )


def sealed_payload(party: int, encapsulated_key: bytes, ciphertext: bytes) -> bytes:
    return field_varint(1, party) + field_bytes(2, encapsulated_key) + field_bytes(3, ciphertext)


def envelope(
    request: Dict[str, Any],
    orb_public_key: bytes,
    payloads: Sequence[bytes],
    signature: bytes,
) -> bytes:
    return (
        field_varint(1, ENVELOPE_VERSION)
        + field_bytes(2, request["request_id"])
        + field_varint(3, REQUEST_TYPES[request["request_type"]])
        + field_varint(4, request["timestamp_ms"])
        + field_varint(5, request["serial_id"])
        + field_varint(6, int(request["or_policy"]))
        + field_bytes(7, orb_public_key)
        + b"".join(field_bytes(8, p) for p in payloads)
        + field_bytes(9, signature)
    )


def payload_len(party: int) -> int:
    share = (bytes(CODE_SHARE_BYTES), bytes(MASK_SHARE_BYTES))
    return len(payload(party, bytes(16), share, share))


def envelope_len(request: Dict[str, Any], orb_public_key: Optional[bytes] = None) -> int:
    sealed = [
        sealed_payload(p, b"\x01" * KEY_BYTES, bytes(payload_len(p) + TAG_BYTES)) for p in range(3)
    ]
    return len(envelope(request, orb_public_key or b"\x01" * KEY_BYTES, sealed, b"\x01" * SIGNATURE_BYTES))


def max_envelope_len() -> int:
    worst = {
        "request_id": bytes(16),
        "request_type": "uniqueness",
        "timestamp_ms": 2**64 - 1,
        "serial_id": 2**64 - 1,
        "or_policy": True,
    }
    return envelope_len(worst)


def digest_input(head: bytes, sealed: List[Dict[str, bytes]], tag_only: bool = False) -> bytes:
    """What the orb's digest hashes. Version 1 takes each ciphertext whole; version 2
    (``tag_only``) only its last TAG_BYTES, the AEAD tag, after the full length."""
    parts = [head]
    for p, s in enumerate(sealed):
        ct = s["ciphertext"]
        parts += [bytes([p]), s["encapsulated_key"], len(ct).to_bytes(4, "big"), ct[-TAG_BYTES:] if tag_only else ct]
    return b"".join(parts)
