"""`collsched trace`: the arrival-trace report, predictors and exports (docs/trace.md).

A thin layer over collsched.patterns; registered by cli.py (add_parsers, COMMANDS)."""
from __future__ import annotations


def add_parsers(sub) -> None:
    """Adds this module's commands to the `collsched` parser."""


COMMANDS: dict = {}
