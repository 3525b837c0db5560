"""`payload_rejections_v2`: decrypted version 2 payloads a node rejects, with the exact error:
the seeded party (the request id as a big-endian integer, mod 3) expects field 6, the seed, and
no eyes; the others no field 6."""

from __future__ import annotations

from typing import List

from ocelli_replay.check import eq
from ocelli_replay.families.envelope_sealing_v2 import VERSION, seeded_party
from ocelli_replay.families.payload_rejections import CASES, party
from ocelli_replay.loader import Failure, Spec, Vector
from ocelli_replay.parse import Rejected, decode_payload


def verify(v: Vector, _all: List[Vector]) -> None:
    c = v.case
    if len(c["request_id"]) != 16:
        raise Failure(f"request_id: {len(c['request_id'])} bytes, expected 16")
    try:
        p = party(c["party"])
        decode_payload(c["payload"], p, c["request_id"], VERSION, seeded_party(c["request_id"]) == p)
    except Rejected as e:
        eq("error", e.as_vector(), c["error"])
        return
    raise Failure(f"error: accepted, expected {c['error']}")


SPEC = Spec("payload_rejections_v2", CASES, verify)
