"""`template_codec`: the open-iris JSON codec, its validation and its exact errors."""

from __future__ import annotations

import base64
import binascii
import json
import math
from typing import Any, List, Tuple

from ocelli_replay import iris
from ocelli_replay.check import eq
from ocelli_replay.loader import Spec, Vector
from ocelli_replay.schema import Tagged

MAX_VERSION_LEN = 32
DEFAULT_MIN_USABLE_BITS = math.ceil(0.70 * iris.CODE_BITS)
FIELDS = ("iris_codes", "mask_codes", "iris_code_version")

ERROR = Tagged(
    units=("json",),
    variants={
        "base64": {"field": "str"},
        "length": {"field": "str", "expected": "usize", "actual": "usize"},
        "version_too_long": {"len": "usize"},
        "mask_parts_differ": {"bit": "usize"},
        "too_few_usable_bits": {"usable": "usize", "required": "usize"},
    },
)
CASES = {
    "accept": {
        "input": "hex",
        "min_usable_bits": "usize",
        "code": "hex",
        "mask": "hex",
        "version": "str",
        "usable_bits": "usize",
        "serialised": "hex",
    },
    "reject": {"input": "hex", "min_usable_bits": "usize", "error": ERROR},
}


class TemplateError(Exception):
    def __init__(self, kind: str, fields: Any = None) -> None:
        super().__init__(kind, fields)
        self.value: Tuple[str, Any] = (kind, fields)


BASE64_CHARS = 2_136


def _decode(obj: Any, field: str) -> bytes:
    text = obj[field]
    if len(text) > BASE64_CHARS + 4:
        raise TemplateError("length", {"field": field, "expected": iris.PACKED_BYTES, "actual": len(text) // 4 * 3})
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise TemplateError("base64", {"field": field}) from None
    if base64.b64encode(data).decode("ascii") != text:
        raise TemplateError("base64", {"field": field})
    if len(data) != iris.PACKED_BYTES:
        raise TemplateError("length", {"field": field, "expected": iris.PACKED_BYTES, "actual": len(data)})
    return data


def parse_template(data: bytes, min_usable_bits: int) -> Tuple[bytes, bytes, str, int]:
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise TemplateError("json") from None
    if (
        not isinstance(obj, dict)
        or set(obj) != set(FIELDS)
        or not all(isinstance(obj[f], str) for f in FIELDS)
    ):
        raise TemplateError("json")
    code = _decode(obj, "iris_codes")
    mask = _decode(obj, "mask_codes")
    version = obj["iris_code_version"]
    bits = iris.unpack(mask)
    for i in range(0, iris.CODE_BITS, 2):
        if bits[i] != bits[i + 1]:
            raise TemplateError("mask_parts_differ", {"bit": i})
    usable = sum(bits)
    if usable < min_usable_bits:
        raise TemplateError("too_few_usable_bits", {"usable": usable, "required": min_usable_bits})
    if len(version.encode("utf-8")) > MAX_VERSION_LEN:
        raise TemplateError("version_too_long", {"len": len(version.encode("utf-8"))})
    return code, mask, version, usable


def serialise(code: bytes, mask: bytes, version: str) -> bytes:
    return json.dumps(
        {
            "iris_codes": base64.b64encode(code).decode("ascii"),
            "mask_codes": base64.b64encode(mask).decode("ascii"),
            "iris_code_version": version,
        }
    ).encode("utf-8")


def verify(v: Vector, _all: List[Vector]) -> None:
    c = v.case
    try:
        parsed = parse_template(c["input"], c["min_usable_bits"])
        got: Any = ("accept", parsed)
    except TemplateError as e:
        got = ("reject", e.value)
    if v.kind == "reject":
        eq("error", got[1] if got[0] == "reject" else "accepted", c["error"])
        return
    if got[0] == "reject":
        eq("accepted", f"rejected with {got[1]}", "accepted")
    code, mask, version, usable = got[1]
    eq("code", code, c["code"])
    eq("mask", mask, c["mask"])
    eq("version", version, c["version"])
    eq("usable_bits", usable, c["usable_bits"])
    written = serialise(code, mask, version)
    eq("serialised", written, c["serialised"])
    if "canonical_input" in v.flags:
        eq("canonical_input flag: serialised equals input", written, c["input"])
    if "non_canonical_input" in v.flags:
        eq("non_canonical_input flag: serialised differs from input", written != c["input"], True)


SPEC = Spec("template_codec", CASES, verify)
