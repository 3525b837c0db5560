"""`masked_bitvectors`: masked values, cd/md per rotation, distances, the match decision."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

from ocelli_replay import iris
from ocelli_replay.check import digest16, eq
from ocelli_replay.loader import Spec, Vector
from ocelli_replay.schema import DIGEST16, TEMPLATE, ListOf, LoadError, Opt, parse

def _min_pair(value: Any, where: str) -> List[Any]:
    if not isinstance(value, list) or len(value) != 2:
        raise LoadError(f"{where}: expected [distance, rotation]")
    return [parse("float", value[0], f"{where}[0]"), parse("i32", value[1], f"{where}[1]")]


_SCORE = {"cd": "i64", "md": "u64", "distance": Opt("float"), "matches": "bool"}
CASES = {
    "masked_value": {"code": "bool", "mask": "bool", "value": "u16"},
    "threshold_coefficient": {"threshold": "float", "a": "u32"},
    "pair": {
        "probe": TEMPLATE,
        "gallery": TEMPLATE,
        "probe_bitvector": DIGEST16,
        "unrotated": _SCORE,
        "rotated": ListOf(_SCORE),
        "min_over_rotations": Opt(_min_pair),
        "a": "u32",
        "matches": "bool",
    },
}


def threshold_coefficient(t: float) -> int:
    return math.floor((1.0 - 2.0 * t) * 65536.0)


def score(pc: Sequence[int], pm: Sequence[int], gc: Sequence[int], gm: Sequence[int], a: int) -> Dict[str, Any]:
    md = 0
    differing = 0
    for i in range(iris.CODE_BITS):
        if pm[i] and gm[i]:
            md += 1
            differing += pc[i] ^ gc[i]
    cd = md - 2 * differing
    distance: Optional[float] = None if md == 0 else (md - cd) / 2 / md
    return {"cd": cd, "md": md, "distance": distance, "matches": md > 0 and 65536 * cd > a * md}


def verify(v: Vector, _all: List[Vector]) -> None:
    c = v.case
    if v.kind == "masked_value":
        eq("value", iris.masked_value(int(c["code"]), int(c["mask"])), c["value"])
        return
    if v.kind == "threshold_coefficient":
        eq("a", threshold_coefficient(c["threshold"]), c["a"])
        return
    pc, pm = iris.unpack(c["probe"]["code"], "probe.code"), iris.unpack(c["probe"]["mask"], "probe.mask")
    gc, gm = iris.unpack(c["gallery"]["code"], "gallery.code"), iris.unpack(c["gallery"]["mask"], "gallery.mask")
    a = c["a"]
    digest16("probe_bitvector", [iris.masked_value(x, m) for x, m in zip(pc, pm)], c["probe_bitvector"])
    for key in ("cd", "md", "distance", "matches"):
        eq(f"unrotated.{key}", score(pc, pm, gc, gm, a)[key], c["unrotated"][key])
    eq("rotated: entries", len(c["rotated"]), 2 * iris.MAX_ROTATION + 1)
    best: Optional[List[float]] = None
    any_match = False
    for index, expected in enumerate(c["rotated"]):
        k = index - iris.MAX_ROTATION
        got = score(iris.rotate_bits(pc, k), iris.rotate_bits(pm, k), gc, gm, a)
        for key in ("cd", "md", "distance", "matches"):
            eq(f"rotated[{index}].{key} (k = {k})", got[key], expected[key])
        if got["distance"] is not None and (best is None or got["distance"] < best[0]):
            best = [got["distance"], k]
        any_match = any_match or got["matches"]
    eq("min_over_rotations", best, c["min_over_rotations"])
    eq("matches", any_match, c["matches"])
    if "match" in v.flags:
        eq("match flag: matches", any_match, True)
    if "no_common_bits" in v.flags:
        eq("no_common_bits flag: min_over_rotations", best, None)


SPEC = Spec("masked_bitvectors", CASES, verify)
