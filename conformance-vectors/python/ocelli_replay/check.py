"""Comparisons that fail with a message naming the field."""

from __future__ import annotations

import hashlib
from typing import Any, Dict, Sequence

from ocelli_replay.loader import Failure


def le16(values: Sequence[int]) -> bytes:
    return b"".join((v & 0xFFFF).to_bytes(2, "little") for v in values)


def eq(what: str, got: Any, expected: Any) -> None:
    if got != expected:
        g, e = _short(got), _short(expected)
        raise Failure(f"{what}: got {g}, expected {e}")


def _short(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        return f"{len(value)} bytes {value[:16].hex()}{'...' if len(value) > 16 else ''}"
    if isinstance(value, list) and len(value) > 16:
        return f"{len(value)} values starting {value[:8]}"
    return repr(value)


def digest16(what: str, values: Sequence[int], expected: Dict[str, Any]) -> None:
    if len(values) != expected["len"]:
        raise Failure(f"{what}: {len(values)} values, expected {expected['len']}")
    head = [v & 0xFFFF for v in values[:16]]
    if head != expected["head"]:
        raise Failure(f"{what}: first values {head}, expected {expected['head']}")
    if hashlib.sha256(le16(values)).digest() != expected["sha256"]:
        raise Failure(f"{what}: SHA-256 differs")
