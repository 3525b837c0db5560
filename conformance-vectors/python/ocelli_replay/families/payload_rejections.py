"""`payload_rejections`: decrypted payloads a node rejects, with the exact error."""

from __future__ import annotations

from typing import List

from ocelli_replay.check import eq
from ocelli_replay.loader import Failure, Spec, Vector
from ocelli_replay.parse import Rejected, decode_payload
from ocelli_replay.schema import Tagged

ERROR = Tagged(
    units=("serial_id", "payload_parties", "signature", "decryption", "payload_request_id"),
    variants={
        "malformed": {"what": "str"},
        "missing_field": {"field": "str"},
        "length": {"field": "str", "expected": "usize", "actual": "usize"},
        "unsupported_version": {"version": "u64"},
        "unknown_request_type": {"value": "u64"},
        "payload_party": {"expected": "u8", "actual": "u64"},
    },
)
CASES = {"reject": {"party": "u8", "request_id": "hex", "payload": "hex", "error": ERROR}}


def party(p: int) -> int:
    if p > 2:
        raise Failure(f"party: {p} is not 0, 1 or 2")
    return p


def verify(v: Vector, _all: List[Vector]) -> None:
    c = v.case
    if len(c["request_id"]) != 16:
        raise Failure(f"request_id: {len(c['request_id'])} bytes, expected 16")
    try:
        decode_payload(c["payload"], party(c["party"]), c["request_id"])
    except Rejected as e:
        eq("error", e.as_vector(), c["error"])
        return
    raise Failure(f"error: accepted, expected {c['error']}")


SPEC = Spec("payload_rejections", CASES, verify)
