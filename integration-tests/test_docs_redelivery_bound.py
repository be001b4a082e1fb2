"""docs/local-event-handlers.md says, beside "deduplicate on ``event_id``", how many events one
crash can deliver again, and names the setting that bounds it, with its real default."""

from __future__ import annotations

import re
from pathlib import Path

from ekbatan.local_event_handler import DEFAULT_HANDLING_BATCH_SIZE

PAGE = Path(__file__).resolve().parent.parent / "docs" / "local-event-handlers.md"


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_the_dedup_section_bounds_a_crash_by_one_handling_batch_per_shard():
    section = " ".join(_section(PAGE.read_text("utf-8"), "At least once: deduplicate on `event_id`").split())
    assert "up to **one handling batch per shard**" in section
    assert "`ekbatan.local-event-handler.handling-batch-size`" in section
    default = re.search(r"handling-batch-size`.*?(\d+) by default", section)
    assert default is not None, section
    assert int(default.group(1)) == DEFAULT_HANDLING_BATCH_SIZE
