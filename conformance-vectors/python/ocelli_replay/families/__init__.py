"""One module per family; IMPLEMENTED lists the families this replayer replays."""

from __future__ import annotations

import importlib
from typing import Dict

from ocelli_replay.loader import Spec

IMPLEMENTED = (
    "ring",
    "layout",
    "masked_bitvectors",
    "rotations",
    "trimmed_masks",
    "template_codec",
    "shamir",
    "preprocess",
    "dot_shares",
    "envelope_header",
    "envelope_sealing",
    "envelope_rejections",
    "payload_rejections",
    "comparison",
    "requests",
)


def specs() -> Dict[str, Spec]:
    return {name: importlib.import_module(f"ocelli_replay.families.{name}").SPEC for name in IMPLEMENTED}
