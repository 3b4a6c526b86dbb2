"""Every algorithm on every bundled topology compiles to the same bytes and the same
predicted times as recorded in tests/data/golden-schedules.json (tools/golden_schedules.py).

A change meant to alter schedules regenerates the table in the same commit and says why;
any other change (a refactor, a hardening fix, a new option) must leave it untouched.
"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import golden_schedules  # noqa: E402


def test_golden_table_is_complete_and_unchanged():
    recorded = json.loads((ROOT / "tests" / "data" / "golden-schedules.json").read_text())
    assert len(recorded) >= 100  # every algorithm x bundled topology x (flat, pattern)
    now = golden_schedules.table()
    assert sorted(now) == sorted(recorded), "the case list changed: regenerate the table"
    changed = [k for k in recorded if now[k] != recorded[k]]
    assert not changed, f"{len(changed)} schedules or predictions changed, first: {changed[0]}: " \
                        f"{recorded[changed[0]]} -> {now[changed[0]]}"
