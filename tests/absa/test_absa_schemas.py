"""ABSA trace steps as printed: one line per step, details never cut mid-token."""

from __future__ import annotations

import json

from moot.absa.schemas import TraceStep


def test_a_progress_line_never_cuts_json_mid_key() -> None:
    stats = {"patch_applied": 3, "patch_rejected": 1, "polarity_changed": 2, "aspects_merged": 0}
    stats |= {"dropped": 1, "confirmed": 4, "unresolved_conflicts": 2}
    line = TraceStep(name="debate_patch", duration_ms=1200, detail=json.dumps(stats)).line()
    assert line == (
        "debate_patch: ok · 1.2s · patch_applied=3 patch_rejected=1 polarity_changed=2 aspects_merged=0 "
        "dropped=1 confirmed=4 +1 more"
    )
    prose = TraceStep(name="ate", duration_ms=0, detail="word " * 40).line()
    assert prose.endswith("word…") and len(prose) < 130
