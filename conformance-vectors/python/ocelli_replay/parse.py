"""The strict envelope and payload parsers of docs/design.md, section 5 ("Parsing, exactly")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

from ocelli_replay import envelope as env

MAX_ENVELOPE_LEN = 230_854
CIPHERTEXT_LEN = (76_858, 76_860, 76_860)
TARGET_TYPES = {3, 4, 5}


class Rejected(Exception):
    """A rejection in the vectors' form: (kind, fields) or (kind, None) for a unit kind."""

    def __init__(self, kind: str, fields: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(kind, fields)
        self.kind = kind
        self.fields = fields

    def as_vector(self) -> Tuple[str, Any]:
        return (self.kind, self.fields)


def malformed(what: str) -> Rejected:
    return Rejected("malformed", {"what": what})


def missing(name: str) -> Rejected:
    return Rejected("missing_field", {"field": name})


def length(name: str, expected: int, actual: int) -> Rejected:
    return Rejected("length", {"field": name, "expected": expected, "actual": actual})


Value = Union[int, bytes]


class Reader:
    def __init__(self, data: bytes, highest: int, repeated: Tuple[int, ...] = ()) -> None:
        self.data, self.pos, self.last = data, 0, 0
        self.highest, self.repeated = highest, repeated

    def _varint(self) -> int:
        value = 0
        for i in range(10):
            if self.pos >= len(self.data):
                raise malformed("truncated protobuf")
            b = self.data[self.pos]
            self.pos += 1
            if i == 9 and b > 1:
                raise malformed("protobuf varint too long")
            value |= (b & 0x7F) << (7 * i)
            if not b & 0x80:
                if i > 0 and b == 0:
                    raise malformed("protobuf varint too long")
                return value
        raise malformed("protobuf varint too long")

    def fields(self) -> Iterator[Tuple[int, Value]]:
        while self.pos < len(self.data):
            key = self._varint()
            number = key >> 3
            if number == 0 or number > self.highest:
                raise malformed("unknown protobuf field")
            if number < self.last or (number == self.last and number not in self.repeated):
                raise malformed("protobuf fields repeated or out of order")
            self.last = number
            wire = key & 7
            if wire == 0:
                yield number, self._varint()
            elif wire == 2:
                n = self._varint()
                if self.pos + n > len(self.data):
                    raise malformed("truncated protobuf")
                value = self.data[self.pos : self.pos + n]
                self.pos += n
                yield number, value
            else:
                raise malformed("unsupported protobuf wire type")


def varint(v: Value) -> int:
    if not isinstance(v, int):
        raise malformed("protobuf field has the wrong wire type")
    return v


def blob(v: Value) -> bytes:
    if not isinstance(v, bytes):
        raise malformed("protobuf field has the wrong wire type")
    return v


def fixed(v: Value, name: str, n: int) -> bytes:
    b = blob(v)
    if len(b) != n:
        raise length(name, n, len(b))
    return b


@dataclass
class Sealed:
    encapsulated_key: bytes
    ciphertext: bytes


@dataclass
class Envelope:
    request: Dict[str, Any]
    orb_key: bytes
    payloads: List[Sealed] = field(default_factory=list)
    signature: bytes = b""

    def header(self) -> bytes:
        return env.header(self.request, self.orb_key)


def parse_sealed(data: bytes, position: int, enc_len: int = 32, ct_len: Optional[int] = None) -> Sealed:
    """One sealed payload; version 2 passes its encapsulated key and ciphertext lengths."""
    expected = CIPHERTEXT_LEN[position] if ct_len is None else ct_len
    party, enc, ct = 0, None, None
    for number, v in Reader(data, 3).fields():
        if number == 1:
            party = varint(v)
            if party == 0:
                raise malformed("explicit zero party_id")
        elif number == 2:
            enc = fixed(v, "encapsulated_key", enc_len)
        else:
            ct = blob(v)
    if party != position:
        raise Rejected("payload_parties")
    if enc is None:
        raise missing("encapsulated_key")
    if ct is None:
        raise missing("ciphertext")
    if len(ct) != expected:
        raise length("ciphertext", expected, len(ct))
    return Sealed(enc, ct)


TYPE_NAMES = {v: k for k, v in env.REQUEST_TYPES.items()}


class Rules:
    """What the parser expects of one envelope version."""

    def __init__(self, version: int, max_len: int, enc_len: int, ct_len: Callable[[int, bytes], int]) -> None:
        self.version, self.max_len, self.enc_len, self.ct_len = version, max_len, enc_len, ct_len


V1 = Rules(env.ENVELOPE_VERSION, MAX_ENVELOPE_LEN, 32, lambda p, _rid: CIPHERTEXT_LEN[p])


def parse_envelope(data: bytes, rules: Rules = V1) -> Envelope:
    if len(data) > rules.max_len:
        raise length("envelope", rules.max_len, len(data))
    version = request_id = request_type = orb_key = signature = None
    timestamp = serial = 0
    or_policy = False
    payloads: List[Sealed] = []
    for number, v in Reader(data, 9, repeated=(8,)).fields():
        if number == 1:
            version = varint(v)
            # The version decides every length after it: checked as soon as it is read.
            if version != rules.version:
                raise Rejected("unsupported_version", {"version": version})
        elif number == 2:
            request_id = fixed(v, "request_id", 16)
        elif number == 3:
            t = varint(v)
            if t not in TYPE_NAMES:
                raise Rejected("unknown_request_type", {"value": t})
            request_type = t
        elif number == 4:
            timestamp = varint(v)
        elif number == 5:
            serial = varint(v)
            if serial == 0:
                raise malformed("explicit zero serial_id")
        elif number == 6:
            if varint(v) != 1:
                raise malformed("or_policy is not a bool")
            or_policy = True
        elif number == 7:
            orb_key = fixed(v, "orb_key", 32)
        elif number == 8:
            if len(payloads) == 3:
                raise Rejected("payload_parties")
            # The request id comes first; an absent one counts as 16 zero bytes.
            p = len(payloads)
            payloads.append(parse_sealed(blob(v), p, rules.enc_len, rules.ct_len(p, request_id or bytes(16))))
        else:
            signature = fixed(v, "signature", 64)
    if version is None:
        raise missing("version")
    if version != rules.version:
        raise Rejected("unsupported_version", {"version": version})
    if request_id is None:
        raise missing("request_id")
    if request_type is None:
        raise missing("request_type")
    if timestamp == 0:
        raise missing("timestamp_ms")
    if (request_type in TARGET_TYPES) != (serial != 0):
        raise Rejected("serial_id")
    if len(payloads) != 3:
        raise Rejected("payload_parties")
    if orb_key is None:
        raise missing("orb_key")
    if signature is None:
        raise missing("signature")
    request = {
        "request_id": request_id,
        "request_type": TYPE_NAMES[request_type],
        "timestamp_ms": timestamp,
        "serial_id": serial,
        "or_policy": or_policy,
    }
    return Envelope(request, orb_key, payloads, signature)


def _eye(data: bytes, names: Tuple[str, str]) -> Tuple[bytes, bytes]:
    seen: List[Optional[bytes]] = [None, None]
    sizes = (env.CODE_SHARE_BYTES, env.MASK_SHARE_BYTES)
    for number, v in Reader(data, 2).fields():
        b = blob(v)
        if len(b) != sizes[number - 1]:
            raise length(names[number - 1], sizes[number - 1], len(b))
        seen[number - 1] = b
    for i in range(2):
        if seen[i] is None:
            raise missing(names[i])
    return seen[0], seen[1]  # type: ignore[return-value]


def decode_payload(
    data: bytes, party: int, request_id: bytes, version_expected: int = env.PAYLOAD_VERSION, seeded: bool = False
) -> Dict[str, Any]:
    """A payload's shares, or for the seeded party of a version 2 envelope its seed (field 6)."""
    version = rid = seed = None
    named = 0
    eyes: Dict[str, Tuple[bytes, bytes]] = {}
    for number, v in Reader(data, 6 if seeded else 5).fields():
        if number == 1:
            version = varint(v)
        elif number == 2:
            named = varint(v)
            if named == 0:
                raise malformed("explicit zero party_id")
        elif number == 3:
            rid = fixed(v, "payload request_id", 16)
        elif number == 6:
            seed = fixed(v, "seed", 32)
        elif seeded:
            raise malformed("shares in a seeded payload")
        else:
            side = "left" if number == 4 else "right"
            eyes[side] = _eye(blob(v), (f"{side}.code", f"{side}.mask"))
    if version is None:
        raise missing("payload version")
    if version != version_expected:
        raise Rejected("unsupported_version", {"version": version})
    if named != party:
        raise Rejected("payload_party", {"expected": party, "actual": named})
    if rid is None:
        raise missing("payload request_id")
    if rid != request_id:
        raise Rejected("payload_request_id")
    if seeded:
        if seed is None:
            raise missing("seed")
        return {"seed": seed}
    for side in ("left", "right"):
        if side not in eyes:
            raise missing(side)
    return {"left": eyes["left"], "right": eyes["right"]}
