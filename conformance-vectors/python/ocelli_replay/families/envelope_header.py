"""`envelope_header`: header bytes (the HPKE AAD), HPKE info strings, sizes."""

from __future__ import annotations

from typing import List

from ocelli_replay import envelope
from ocelli_replay.check import eq
from ocelli_replay.loader import Failure, Spec, Vector
from ocelli_replay.schema import ListOf

CASES = {
    "sizes": {"payload_len": ListOf("usize"), "ciphertext_len": ListOf("usize"), "max_envelope_len": "usize"},
    "header": {
        "request": envelope.REQUEST,
        "orb_public_key": "hex",
        "header": "hex",
        "hpke_info": ListOf("hex"),
        "envelope_len": "usize",
    },
}


def check_request(request: dict) -> None:
    if request["request_type"] not in envelope.REQUEST_TYPES:
        raise Failure(f"request.request_type: unknown type {request['request_type']!r}")
    if len(request["request_id"]) != 16:
        raise Failure(f"request.request_id: {len(request['request_id'])} bytes, expected 16")


def verify(v: Vector, _all: List[Vector]) -> None:
    c = v.case
    if v.kind == "sizes":
        eq("payload_len", [envelope.payload_len(p) for p in range(3)], c["payload_len"])
        eq("ciphertext_len", [envelope.payload_len(p) + envelope.TAG_BYTES for p in range(3)], c["ciphertext_len"])
        eq("max_envelope_len", envelope.max_envelope_len(), c["max_envelope_len"])
        return
    request = c["request"]
    check_request(request)
    eq("header", envelope.header(request, c["orb_public_key"]), c["header"])
    eq("hpke_info", [envelope.hpke_info(p, request["request_id"]) for p in range(3)], c["hpke_info"])
    eq("envelope_len", envelope.envelope_len(request, c["orb_public_key"]), c["envelope_len"])


SPEC = Spec("envelope_header", CASES, verify)
