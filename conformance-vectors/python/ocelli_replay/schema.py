"""Strict shapes of the vector files: every field required, no field unknown."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Union

_HEX = re.compile(r"\A(?:[0-9a-f]{2})*\Z")


class LoadError(Exception):
    """A vector file that does not load: nothing of it is replayed."""


@dataclass(frozen=True)
class Opt:
    inner: "Shape"


@dataclass(frozen=True)
class ListOf:
    inner: "Shape"


@dataclass(frozen=True)
class Tagged:
    """An externally tagged enum: a bare string for a unit variant, else a one-key object."""

    units: tuple
    variants: Mapping[str, "Shape"]


Shape = Union[str, Opt, ListOf, Tagged, Mapping[str, Any], Callable[[Any, str], Any]]


def hex_bytes(value: Any, where: str) -> bytes:
    if not isinstance(value, str):
        raise LoadError(f"{where}: expected a hex string")
    if not _HEX.match(value):
        if any(c.isupper() for c in value):
            raise LoadError(f"{where}: hex must be lowercase")
        raise LoadError(f"{where}: malformed hex")
    return bytes.fromhex(value)


def u16s(data: bytes) -> List[int]:
    return [data[i] | data[i + 1] << 8 for i in range(0, len(data), 2)]


def u32s(data: bytes) -> List[int]:
    return [int.from_bytes(data[i : i + 4], "little") for i in range(0, len(data), 4)]


def _int(value: Any, where: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise LoadError(f"{where}: expected an integer")
    if not lo <= value <= hi:
        raise LoadError(f"{where}: {value} out of range")
    return value


def _scalar(kind: str, value: Any, where: str) -> Any:
    if kind == "hex":
        return hex_bytes(value, where)
    if kind == "u16hex":
        data = hex_bytes(value, where)
        if len(data) % 2:
            raise LoadError(f"{where}: odd number of bytes for u16 values")
        return u16s(data)
    if kind == "u32hex":
        data = hex_bytes(value, where)
        if len(data) % 4:
            raise LoadError(f"{where}: byte count not a multiple of 4 for u32 values")
        return u32s(data)
    if kind == "bits":
        if not isinstance(value, str) or set(value) - {"0", "1"}:
            raise LoadError(f"{where}: expected a string of 0 and 1")
        return [c == "1" for c in value]
    if kind == "u8":
        return _int(value, where, 0, 0xFF)
    if kind == "u16":
        return _int(value, where, 0, 0xFFFF)
    if kind == "u32":
        return _int(value, where, 0, 0xFFFF_FFFF)
    if kind == "u64" or kind == "usize":
        return _int(value, where, 0, 0xFFFF_FFFF_FFFF_FFFF)
    if kind == "i32":
        return _int(value, where, -(2**31), 2**31 - 1)
    if kind == "i64":
        return _int(value, where, -(2**63), 2**63 - 1)
    if kind == "bool":
        if not isinstance(value, bool):
            raise LoadError(f"{where}: expected a boolean")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise LoadError(f"{where}: expected a number")
        return float(value)
    if kind == "str":
        if not isinstance(value, str):
            raise LoadError(f"{where}: expected a string")
        return value
    raise AssertionError(kind)


def parse(shape: Shape, value: Any, where: str) -> Any:
    """Checks `value` against `shape` and decodes hex, u16 arrays and bit strings."""
    if isinstance(shape, str):
        return _scalar(shape, value, where)
    if isinstance(shape, Opt):
        return None if value is None else parse(shape.inner, value, where)
    if isinstance(shape, ListOf):
        if not isinstance(value, list):
            raise LoadError(f"{where}: expected an array")
        return [parse(shape.inner, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(shape, Tagged):
        if isinstance(value, str):
            if value not in shape.units:
                raise LoadError(f"{where}: unknown variant {value!r}")
            return (value, None)
        if not isinstance(value, dict) or len(value) != 1:
            raise LoadError(f"{where}: expected a one-key object or a unit variant")
        ((tag, inner),) = value.items()
        if tag not in shape.variants:
            raise LoadError(f"{where}: unknown variant {tag!r}")
        return (tag, parse(shape.variants[tag], inner, f"{where}.{tag}"))
    if isinstance(shape, Mapping):
        if not isinstance(value, dict):
            raise LoadError(f"{where}: expected an object")
        for key in value:
            if key not in shape:
                raise LoadError(f"{where}: unknown field `{key}`")
        out: Dict[str, Any] = {}
        for key, inner in shape.items():
            if key not in value:
                if isinstance(inner, Opt):
                    out[key] = None
                    continue
                raise LoadError(f"{where}: missing field `{key}`")
            out[key] = parse(inner, value[key], f"{where}.{key}")
        return out
    if callable(shape):
        return shape(value, where)
    raise AssertionError(shape)


DIGEST16: Mapping[str, Any] = {"len": "usize", "sha256": "hex", "head": "u16hex"}
TEMPLATE: Mapping[str, Any] = {"code": "hex", "mask": "hex"}
ELEMENT = "u16hex"
