"""`ocelli-replay [DIR] [--families a,b,...]`: the pass/fail table of `conformance-vectors verify`.

Exit status: 0 when every replayed vector passed and no family was left unreplayed, 1 when a
vector failed or a family is not replayed by this implementation, 2 when a file does not load.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from ocelli_replay.families import specs
from ocelli_replay.loader import FAMILIES, Failure, Spec, families_in, load_text
from ocelli_replay.schema import LoadError


@dataclass
class Report:
    family: str
    vectors: int = 0
    passed: int = 0
    failures: List[Tuple[int, str]] = field(default_factory=list)

    def ok(self) -> bool:
        return not self.failures and self.passed == self.vectors


def replay(spec: Spec, text: str) -> Report:
    vectors = load_text(spec, text)
    report = Report(spec.family, len(vectors))
    for v in vectors:
        try:
            spec.verify(v, vectors)
            report.passed += 1
        except Failure as e:
            report.failures.append((v.id, str(e)))
        except Exception as e:  # an exception in the replay is that vector's failure
            where = traceback.extract_tb(e.__traceback__)[-1]
            report.failures.append((v.id, f"raised {type(e).__name__}: {e} ({where.name}:{where.lineno})"))
    return report


def verify_file(directory: Path, family: str, spec: Spec) -> Report:
    path = directory / f"{family}.json"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise LoadError(f"{path}: {e}") from None
    return replay(spec, text)


def print_table(reports: Sequence[Report], not_replayed: Sequence[str]) -> None:
    row = "{:<22} {:>8} {:>8} {:>8}"
    print(row.format("family", "vectors", "passed", "failed"))
    for r in reports:
        print(row.format(r.family, r.vectors, r.passed, r.vectors - r.passed))
    total = sum(r.vectors for r in reports)
    passed = sum(r.passed for r in reports)
    print(row.format("total", total, passed, total - passed))
    for r in reports:
        for vid, why in r.failures:
            print(f"FAIL {r.family} #{vid}: {why}")
    for family in not_replayed:
        print(f"NOT REPLAYED {family}: no Python implementation of this family yet")


def default_dir() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here.parent.parent / "vectors", Path.cwd() / "conformance-vectors" / "vectors"):
        if candidate.is_dir():
            return candidate
    return Path("vectors")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ocelli-replay",
        description="Replays ocelli's conformance vectors with an implementation written from the documents.",
    )
    parser.add_argument("dir", nargs="?", type=Path, help="directory of the vector files")
    parser.add_argument(
        "--families",
        help="comma-separated families to replay (default: every family file in DIR, all required)",
    )
    args = parser.parse_args(argv)
    directory: Path = args.dir or default_dir()
    implemented = specs()
    try:
        if args.families:
            families = [f.strip() for f in args.families.split(",") if f.strip()]
            for f in families:
                if f not in FAMILIES:
                    parser.error(f"unknown family {f!r}; families: {', '.join(FAMILIES)}")
        else:
            families = families_in(directory)
        reports = []
        not_replayed = []
        for f in families:
            if f in implemented:
                reports.append(verify_file(directory, f, implemented[f]))
            else:
                not_replayed.append(f)
    except LoadError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print_table(reports, not_replayed)
    return 0 if all(r.ok() for r in reports) and not not_replayed else 1


if __name__ == "__main__":
    sys.exit(main())
