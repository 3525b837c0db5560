"""Iris codes: packed bits, masked values, the share layout and rotations (docs/design.md, 3-4)."""

from __future__ import annotations

from typing import List, Sequence

from ocelli_replay.loader import Failure

CODE_BITS = 12_800
PACKED_BYTES = 1_600
ROWS, COLUMNS, BITS_PER_COLUMN = 16, 200, 4
ROW_BITS = COLUMNS * BITS_PER_COLUMN
MASK_COEFS = 6_400
MAX_ROTATION = 15


def unpack(data: bytes, what: str = "packed bits") -> List[int]:
    if len(data) != PACKED_BYTES:
        raise Failure(f"{what}: {len(data)} bytes, expected {PACKED_BYTES}")
    return [(data[i >> 3] >> (7 - (i & 7))) & 1 for i in range(CODE_BITS)]


def pack(bits: Sequence[int]) -> bytes:
    out = bytearray(len(bits) // 8)
    for i, b in enumerate(bits):
        if b:
            out[i >> 3] |= 0x80 >> (i & 7)
    return bytes(out)


def masked_value(code: int, mask: int) -> int:
    return (mask - 2 * (code & mask)) & 0xFFFF


def plain_bit_index(i: int) -> int:
    b = i // 6400
    w = (i % 6400) // 3200
    r1 = (i % 3200) // 800
    c = (i % 800) // 4
    r2 = i % 4
    r = 4 * r2 + r1
    return 800 * r + 4 * c + 2 * w + b


LAYOUT: List[int] = [plain_bit_index(i) for i in range(CODE_BITS)]


def rotate_bits(bits: Sequence[int], k: int) -> List[int]:
    """numpy.roll(x, k, axis=1) on the (16, 200, 4) view: column c takes column c - k."""
    shift = (k % COLUMNS) * BITS_PER_COLUMN
    out: List[int] = []
    for r in range(ROWS):
        row = bits[r * ROW_BITS : (r + 1) * ROW_BITS]
        out.extend(row[ROW_BITS - shift :] + row[: ROW_BITS - shift] if shift else row)
    return out


def code_coefs(code: Sequence[int], mask: Sequence[int]) -> List[int]:
    return [masked_value(code[p], mask[p]) for p in LAYOUT]


def trimmed_mask_coefs(mask: Sequence[int]) -> List[int]:
    return [mask[LAYOUT[i]] for i in range(MASK_COEFS)]


def rotate_coefs(coefs: Sequence[int], k: int) -> List[int]:
    """Each 800-coefficient chunk rolled by 4k coefficients."""
    shift = (k % COLUMNS) * BITS_PER_COLUMN
    out: List[int] = []
    for s in range(0, len(coefs), ROW_BITS):
        chunk = list(coefs[s : s + ROW_BITS])
        out.extend(chunk[ROW_BITS - shift :] + chunk[: ROW_BITS - shift] if shift else chunk)
    return out
