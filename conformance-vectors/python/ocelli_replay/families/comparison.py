"""`comparison`: the comparison phase (docs/conformance.md, `comparison`) recomputed per party,
round by round, from the recorded shares and the PRF seeds."""

from __future__ import annotations

from typing import Any, Dict, List

from ocelli_replay import msb
from ocelli_replay.check import eq
from ocelli_replay.loader import Failure, Spec, Vector
from ocelli_replay.rng import ChaChaStream
from ocelli_replay.schema import ListOf

M16, M32 = 0xFFFF, 0xFFFF_FFFF
X_BITS = 32
PARTS = {"cd": "u16hex", "md": "u16hex", "cross": "u16hex", "x": "u32hex", "matches": "bits"}
CASES = {
    "compare": {
        "threshold_a": "u32",
        "plain_cd": ListOf("i32"),
        "plain_md": ListOf("u32"),
        "cd_shares": ListOf("u16hex"),
        "md_shares": ListOf("u16hex"),
        "prf_seeds": ListOf("hex"),
        "parties": ListOf(PARTS),
        **PARTS,
    }
}


def run(a_coef: int, cd_shares: List[List[int]], md_shares: List[List[int]], seeds: List[bytes]) -> List[Dict[str, List[Any]]]:
    """Each party's parts of cd, md, the cross term and x, and its own component of the match bits."""
    n = len(cd_shares[0])
    streams = [ChaChaStream(s) for s in seeds]
    s = [cd_shares[p] + md_shares[p] for p in range(3)]
    r = streams[2].u16s(2 * n)
    t = streams[1].u16s(2 * n)
    b = [(s[2][i] + t[i] - r[i]) & M16 for i in range(2 * n)]
    a = [((s[0][i] + r[i]) + s[1][i] - t[i]) & M16 for i in range(2 * n)]
    w0 = streams[0].u16s(n)
    streams[0].u16s(n)
    p2 = streams[1].u16s(n)
    u = [a[n + i] >> 15 for i in range(n)]
    v = [b[n + i] >> 15 for i in range(n)]
    p = [(w0[i] + p2[i]) & M16 for i in range(n)]
    q = [((a_coef * u[i] - p[i]) if v[i] else (-p2[i] - w0[i])) & M16 for i in range(n)]

    def x_part(cd: List[int], md: List[int], top: List[int], k: List[int]) -> List[int]:
        return [(a_coef * md[i] - 65536 * (cd[i] + a_coef * top[i] - k[i])) & M32 for i in range(n)]

    one: Dict[str, List[Any]] = {"cd": a[:n], "md": a[n:], "cross": p, "x": x_part(a[:n], a[n:], u, p)}
    other: Dict[str, List[Any]] = {"cd": b[:n], "md": b[n:], "cross": q, "x": x_part(b[:n], b[n:], v, q)}
    w = -(-n // 64)
    r_planes = streams[0].u64s(X_BITS * w)
    zeros = [0] * (X_BITS * w)
    single = (r_planes, [x ^ y for x, y in zip(msb.to_planes(one["x"], X_BITS, w), r_planes)], zeros)
    pair = (zeros, zeros, msb.to_planes(other["x"], X_BITS, w))
    carry = msb.carry_into(streams, single, pair, w, X_BITS - 1)
    bits = msb.xor(msb.xor(msb.plane(single, w, X_BITS - 1), msb.plane(pair, w, X_BITS - 1)), carry)
    parts = [dict(other), dict(one), dict(other)]
    for party in range(3):
        parts[party]["matches"] = [bool(bits[party][e // 64] >> (e % 64) & 1) for e in range(n)]
    return parts


def verify(v: Vector, _all: List[Vector]) -> None:
    c = v.case
    a_coef = c["threshold_a"]
    n = len(c["plain_cd"])
    for key in ("cd_shares", "md_shares", "prf_seeds", "parties"):
        eq(f"{key}: count", len(c[key]), 3)
    for p in range(3):
        eq(f"cd_shares[{p}]: count", len(c["cd_shares"][p]), n)
        eq(f"md_shares[{p}]: count", len(c["md_shares"][p]), n)
        if len(c["prf_seeds"][p]) != 32:
            raise Failure(f"prf_seeds[{p}]: {len(c['prf_seeds'][p])} bytes, expected 32")
    eq("plain_md: count", len(c["plain_md"]), n)
    for name, plain in (("cd_shares", c["plain_cd"]), ("md_shares", c["plain_md"])):
        sums = [sum(c[name][p][i] for p in range(3)) & M16 for i in range(n)]
        eq(f"{name}: sum", sums, [x & M16 for x in plain])
    parts = run(a_coef, c["cd_shares"], c["md_shares"], c["prf_seeds"])
    for p in range(3):
        for key in ("cd", "md", "cross", "x", "matches"):
            eq(f"parties[{p}].{key}", parts[p][key], c["parties"][p][key])
    mask = {"cd": M16, "md": M16, "cross": M16, "x": M32}
    for key in ("cd", "md", "cross", "x"):
        opened = [(parts[1][key][i] + parts[0][key][i]) & mask[key] for i in range(n)]
        eq(key, opened, c[key])
    u = [parts[1]["md"][i] >> 15 for i in range(n)]
    w = [parts[0]["md"][i] >> 15 for i in range(n)]
    eq("cross = A u v", c["cross"], [(a_coef * u[i] * w[i]) & M16 for i in range(n)])
    eq("cd = plain_cd mod 2^16", c["cd"], [x & M16 for x in c["plain_cd"]])
    eq("md = plain_md mod 2^16", c["md"], [x & M16 for x in c["plain_md"]])
    eq("x = A md - 2^16 cd", c["x"], [(a_coef * md - 65536 * cd) & M32 for cd, md in zip(c["plain_cd"], c["plain_md"])])
    bits = [c["parties"][0]["matches"][i] ^ c["parties"][1]["matches"][i] ^ c["parties"][2]["matches"][i] for i in range(n)]
    eq("matches: the XOR of the parties' components", bits, c["matches"])
    expected: List[Any] = [65536 * cd > a_coef * md for cd, md in zip(c["plain_cd"], c["plain_md"])]
    eq("matches = 2^16 cd > A md", c["matches"], expected)
    eq("matches = MSB(x)", c["matches"], [bool(x >> 31) for x in c["x"]])


SPEC = Spec("comparison", CASES, verify)
