"""The file format shared by every family (docs/conformance.md, "File format")."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping

from ocelli_replay.schema import LoadError, parse

FORMAT = "ocelli-conformance-vectors"
FORMAT_VERSION = 1

FAMILIES = (
    "template_codec",
    "masked_bitvectors",
    "rotations",
    "layout",
    "ring",
    "shamir",
    "trimmed_masks",
    "preprocess",
    "dot_shares",
    "envelope_header",
    "envelope_sealing",
    "envelope_sealing_v2",
    "envelope_rejections",
    "envelope_rejections_v2",
    "payload_rejections",
    "payload_rejections_v2",
    "comparison",
    "requests",
)

FLAGS = frozenset(
    {
        "open_iris_fixture",
        "synthetic",
        "edge_case",
        "canonical_input",
        "non_canonical_input",
        "invalid",
        "no_common_bits",
        "match",
        "non_unit",
        "zero_randomness",
        "rotation_out_of_range",
        "valid_signature",
        "tampered",
        "hazmat_sealed",
        "intra_batch",
    }
)


@dataclass
class Vector:
    id: int
    comment: str
    flags: List[str]
    kind: str
    case: Dict[str, Any]


class Failure(Exception):
    """A vector whose replay differs from what it records; the message names the field."""


@dataclass
class Spec:
    family: str
    cases: Mapping[str, Mapping[str, Any]]
    verify: Callable[[Vector, List[Vector]], None]
    check_file: Callable[[List[Vector]], None] = lambda vectors: None


def _vector(raw: Any, index: int, cases: Mapping[str, Mapping[str, Any]]) -> Vector:
    where = f"vectors[{index}]"
    fields = {"id": "u32", "comment": "str", "flags": None, "case": None}
    if not isinstance(raw, dict):
        raise LoadError(f"{where}: expected an object")
    for key in raw:
        if key not in fields:
            raise LoadError(f"{where}: unknown field `{key}`")
    for key in fields:
        if key not in raw:
            raise LoadError(f"{where}: missing field `{key}`")
    vid = parse("u32", raw["id"], f"{where}.id")
    comment = parse("str", raw["comment"], f"{where}.comment")
    flags = raw["flags"]
    if not isinstance(flags, list):
        raise LoadError(f"{where}.flags: expected an array")
    for flag in flags:
        if flag not in FLAGS:
            raise LoadError(f"{where}.flags: unknown flag {flag!r}")
    case = raw["case"]
    if not isinstance(case, dict) or len(case) != 1:
        raise LoadError(f"{where}.case: expected an object with exactly one key")
    ((kind, body),) = case.items()
    if kind not in cases:
        raise LoadError(f"{where}.case: unknown case kind {kind!r}")
    return Vector(vid, comment, list(flags), kind, parse(cases[kind], body, f"{where}.case.{kind}"))


def load_text(spec: Spec, text: str) -> List[Vector]:
    """Parses and checks a vector file: any deviation from the format is a LoadError."""
    try:
        return _load(spec, text)
    except LoadError as e:
        raise LoadError(f"{spec.family}: {e}") from None


def _load(spec: Spec, text: str) -> List[Vector]:
    try:
        raw = json.loads(text, object_pairs_hook=_no_duplicates)
    except ValueError as e:
        raise LoadError(f"not JSON: {e}") from None
    top = {"format", "format_version", "family", "description", "generator", "vectors"}
    if not isinstance(raw, dict):
        raise LoadError("expected an object")
    for key in raw:
        if key not in top:
            raise LoadError(f"unknown field `{key}`")
    for key in sorted(top):
        if key not in raw:
            raise LoadError(f"missing field `{key}`")
    fmt = parse("str", raw["format"], "format")
    version = parse("u32", raw["format_version"], "format_version")
    family = parse("str", raw["family"], "family")
    if family not in FAMILIES:
        raise LoadError(f"family: unknown family {family!r}")
    parse("str", raw["description"], "description")
    parse("str", raw["generator"], "generator")
    if not isinstance(raw["vectors"], list):
        raise LoadError("vectors: expected an array")
    vectors = [_vector(v, i, spec.cases) for i, v in enumerate(raw["vectors"])]
    if fmt != FORMAT:
        raise LoadError(f"format {fmt!r}, expected {FORMAT!r}")
    if version != FORMAT_VERSION:
        raise LoadError(f"format_version {version}, this tool reads {FORMAT_VERSION}")
    if family != spec.family:
        raise LoadError(f"file holds family {family}")
    if not vectors:
        raise LoadError("no vectors")
    for i, v in enumerate(vectors):
        if v.id != i + 1:
            raise LoadError(f"vector ids must be 1, 2, 3, ...; found {v.id} at {i + 1}")
        if len(set(v.flags)) != len(v.flags):
            raise LoadError(f"vector {v.id}: repeated flag")
    spec.check_file(vectors)
    return vectors


def _no_duplicates(pairs: List[tuple]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise LoadError(f"duplicate field `{key}`")
        out[key] = value
    return out


def families_in(directory: Path) -> List[str]:
    """The families whose files are in `directory`; every known family must be there."""
    try:
        names = [p.name for p in directory.iterdir()]
    except OSError as e:
        raise LoadError(f"{directory}: {e}") from None
    found = []
    for name in names:
        if not name.endswith(".json"):
            continue
        stem = name[: -len(".json")]
        if stem not in FAMILIES:
            raise LoadError(f"unknown family file {name}")
        found.append(stem)
    for family in FAMILIES:
        if family not in found:
            raise LoadError(f"{family}.json: missing from {directory}")
    return [f for f in FAMILIES if f in found]
