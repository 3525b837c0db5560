"""Self-test: one changed byte in a copy of each family's file makes the replay fail, naming the field.

    python3 -m ocelli_replay.selftest [--vectors DIR] [--rust PATH-TO-conformance-vectors]

For each implemented family the copy changes one character of one field (a hex digit, kept
lowercase hex, so the file still loads); the Python replayer must then fail that family with a
reason naming the field, and, with --rust, the Rust `conformance-vectors verify` must fail too.
Some families get several such edits, one copy each.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ocelli_replay import cli
from ocelli_replay.families import IMPLEMENTED

# family -> edits, each (the field whose value is changed, offset of the changed hex digit, a
# reason substring); the first occurrence of the field, or the n-th for "field#n". "text:old|new"
# replaces the first `old`; "masked:code#n" and "usable:code#n" change the first hex digit of the
# n-th code whose mask digit is 0 (a bit nothing compares) or f (a bit every comparison reads).
EDITS: Dict[str, List[Tuple[str, int, str]]] = {
    "template_codec": [("serialised", 10, "serialised")],
    "masked_bitvectors": [("head", 0, "probe_bitvector")],
    "rotations": [("expected", 5, "expected")],
    "layout": [("plain_bit_index", 4, "plain_bit_index[")],
    "ring": [("expected", 0, "expected")],
    "shamir": [("shares", 0, "shares[0]")],
    "trimmed_masks": [("sha256", 3, "trimmed_a")],
    "preprocess": [("expected", 2, "expected")],
    "dot_shares": [("entry_rng_seed", 7, "party_shares[0]")],
    "envelope_header": [("header", 40, "header")],
    "envelope_sealing": [("signature", 9, "signature")],
    "envelope_sealing_v2": [("share_seed", 5, "share_seed")],
    "envelope_rejections": [("envelope", 2000, "party 0")],
    "envelope_rejections_v2": [
        ("opened_sha256", 5, "opened_sha256[0]"),
        ("text:\"intake\": \"version1_refused\"|\"intake\": \"bad_length\"", 0, "intake"),
    ],
    "payload_rejections": [("payload#2", 3, "error")],
    "payload_rejections_v2": [("payload#1", 3, "error")],
    "comparison": [("prf_seeds", 1, "parties[0].cross")],
    "requests": [
        ("text:\"reauth\": true|\"reauth\": false", 0, "outcomes[0] (reauth)"),
        # The seeds derive from the vector id and positions: nothing else of a person but its
        # template reaches the nodes, so the edits below are the ones no outcome shows.
        ("usable:code#1", 0, "comparisons[0][0].left"),
        ("masked:code#2", 0, "people[0].right.code"),
        ("usable:code#9", 0, "comparisons[0][0].left"),
        ("masked:code#9", 0, "requests[0].left.code"),
        ("text:\"threshold_a\": 20316|\"threshold_a\": 20317", 0, "comparisons[0][0].left"),
        ("left", 7, "comparisons[0][0].left"),
        ("text:\"or_policy\": false|\"or_policy\": true", 0, "requests[0].or_policy"),
        ("text:\"serial_id\": 0,|\"serial_id\": 6,", 0, "requests[0].serial_id"),
    ],
}


def flip(text: str, field: str, offset: int) -> str:
    if field.startswith("text:"):
        old, new = field[len("text:") :].split("|")
        if old not in text:
            raise SystemExit(f"selftest: no {old!r} to change")
        return text.replace(old, new, 1)
    kind, _, rest = field.rpartition(":")
    name, _, nth = rest.partition("#")
    matches = list(re.finditer(r'"%s":\s*(?:\[\s*)?"' % re.escape(name), text))[: int(nth or 1)]
    match = matches[-1] if len(matches) == int(nth or 1) else None
    if match is None:
        raise SystemExit(f"selftest: no string field {field!r} to change")
    at = match.end() + offset
    if kind:
        # a template is {"code": ..., "mask": ...}: the mask's digits follow the code's
        mask = re.compile(r'"mask":\s*"').search(text, at).end()
        want = "0" if kind == "masked" else "f"
        at += next(i for i in range(1_000_000) if text[mask + i] == want)
    digit = text[at]
    new = "0123456789abcdef"[("0123456789abcdef".index(digit) + 1) % 16]
    return text[:at] + new + text[at + 1 :]


def run_python(directory: Path, family: str) -> Tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = cli.main([str(directory), "--families", family])
    return code, out.getvalue()


def run_rust(binary: str, directory: Path, family: str) -> Tuple[int, str]:
    proc = subprocess.run(
        [binary, "verify", "--dir", str(directory), "--family", family],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr


# edits of ring.json that must make the file fail to load (exit 2): (what, old, new)
LOAD_EDITS: List[Tuple[str, str, str]] = [
    ("format_version 2", '"format_version": 1', '"format_version": 2'),
    ("an unknown top-level field", '"family": "ring",', '"family": "ring", "extra": 0,'),
    ("an unknown vector field", '"id": 1,', '"id": 1, "extra": 0,'),
    ("an unknown flag", '"flags": []', '"flags": ["shiny"]'),
    ("an unknown case kind", '"mul": {', '"div": {'),
    ("a repeated flag", '"flags": [\n        "edge_case"', '"flags": [\n        "edge_case", "edge_case"'),
    ("ids out of sequence", '"id": 2,', '"id": 3,'),
    ("uppercase hex", '"a": "ffff', '"a": "FFFF'),
    ("another family", '"family": "ring"', '"family": "layout"'),
]


def strictness(source: Path, rust: Optional[str]) -> List[str]:
    failures = []
    text = (source / "ring.json").read_text(encoding="utf-8")
    for what, old, new in LOAD_EDITS:
        if old not in text:
            failures.append(f"strictness: {what}: {old!r} not in ring.json")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp)
            (directory / "ring.json").write_text(text.replace(old, new, 1), encoding="utf-8")
            code, output = run_python(directory, "ring")
            line = f"ring.json with {what}: python exit {code} ({output.strip()[:100]})"
            if code != 2:
                failures.append(f"strictness: {line}")
                continue
            if rust:
                rcode, routput = run_rust(rust, directory, "ring")
                line += f"; rust exit {rcode}"
                if rcode != 2:
                    failures.append(f"strictness: {line}: {routput[:200]}")
                    continue
            print(line)
    return failures


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m ocelli_replay.selftest")
    parser.add_argument("--vectors", type=Path, default=None, help="the checked-in vector directory")
    parser.add_argument("--rust", help="path of the Rust conformance-vectors binary, to check it fails too")
    args = parser.parse_args(argv)
    source: Path = args.vectors or cli.default_dir()
    failures: List[str] = []
    edits = [(family, edit) for family in IMPLEMENTED for edit in EDITS[family]]
    for family, (field, offset, reason) in edits:
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp)
            for path in source.glob("*.json"):
                shutil.copy(path, directory / path.name)
            code, output = run_python(directory, family)
            if code != 0:
                failures.append(f"{family}: the unchanged copy fails:\n{output}")
                continue
            target = directory / f"{family}.json"
            target.write_text(flip(target.read_text(encoding="utf-8"), field, offset), encoding="utf-8")
            code, output = run_python(directory, family)
            fail_lines = [line for line in output.splitlines() if line.startswith(f"FAIL {family} ")]
            if code != 1 or not fail_lines or reason not in fail_lines[0]:
                failures.append(f"{family}: changing `{field}` gave exit {code}, expected 1 and a FAIL naming {reason!r}:\n{output}")
                continue
            line = f"{family:<22} `{field}` changed: python fails ({fail_lines[0]})"
            if args.rust:
                rcode, routput = run_rust(args.rust, directory, family)
                if rcode == 0:
                    failures.append(f"{family}: changing `{field}` left the Rust replay passing:\n{routput}")
                    continue
                rust_fail = next((l for l in routput.splitlines() if l.startswith("FAIL") or l.startswith("error")), "")
                line += f"; rust fails (exit {rcode}: {rust_fail[:120]})"
            print(line[:400])
    failures += strictness(source, args.rust)
    for f in failures:
        print(f"SELFTEST FAIL {f}")
    print(f"selftest: {len(edits) + len(LOAD_EDITS) - len(failures)} of {len(edits) + len(LOAD_EDITS)} changed copies of {len(IMPLEMENTED)} families fail as they must")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
