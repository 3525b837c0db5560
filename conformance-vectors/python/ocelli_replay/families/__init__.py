"""One module per family; IMPLEMENTED lists the families this replayer replays."""

from __future__ import annotations

import importlib
from typing import Dict

from ocelli_replay.loader import FAMILIES, Spec

# Every family of the format has its module here.
IMPLEMENTED = FAMILIES


def specs() -> Dict[str, Spec]:
    return {name: importlib.import_module(f"ocelli_replay.families.{name}").SPEC for name in IMPLEMENTED}
