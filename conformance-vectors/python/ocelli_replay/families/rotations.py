"""`rotations`: numpy.roll of packed bits, and of share coefficients chunk by chunk."""

from __future__ import annotations

from typing import List

from ocelli_replay import iris
from ocelli_replay.check import digest16, eq
from ocelli_replay.loader import Spec, Vector
from ocelli_replay.schema import DIGEST16, TEMPLATE, ListOf

CASES = {
    "all_rotations": {"input": "hex", "rotations": ListOf("hex")},
    "bits": {"input": "hex", "k": "i32", "expected": "hex"},
    "coefs": {"template": TEMPLATE, "k": "i32", "code": DIGEST16, "trimmed_mask": DIGEST16},
}


def verify(v: Vector, _all: List[Vector]) -> None:
    c = v.case
    if v.kind == "all_rotations":
        bits = iris.unpack(c["input"], "input")
        eq("rotations: entries", len(c["rotations"]), 2 * iris.MAX_ROTATION + 1)
        for index, expected in enumerate(c["rotations"]):
            k = index - iris.MAX_ROTATION
            eq(f"rotations[{index}] (k = {k})", iris.pack(iris.rotate_bits(bits, k)), expected)
        return
    if v.kind == "bits":
        eq("expected", iris.pack(iris.rotate_bits(iris.unpack(c["input"], "input"), c["k"])), c["expected"])
        if "rotation_out_of_range" in v.flags:
            eq("rotation_out_of_range flag: |k| > 15", abs(c["k"]) > iris.MAX_ROTATION, True)
        return
    code = iris.unpack(c["template"]["code"], "template.code")
    mask = iris.unpack(c["template"]["mask"], "template.mask")
    k = c["k"]
    code_coefs = iris.rotate_coefs(iris.code_coefs(code, mask), k)
    mask_coefs = iris.rotate_coefs(iris.trimmed_mask_coefs(mask), k)
    digest16("code", code_coefs, c["code"])
    digest16("trimmed_mask", mask_coefs, c["trimmed_mask"])
    rc, rm = iris.rotate_bits(code, k), iris.rotate_bits(mask, k)
    eq("code: the rotated template's coefficients", iris.code_coefs(rc, rm), code_coefs)
    eq("trimmed_mask: the rotated template's coefficients", iris.trimmed_mask_coefs(rm), mask_coefs)


SPEC = Spec("rotations", CASES, verify)
