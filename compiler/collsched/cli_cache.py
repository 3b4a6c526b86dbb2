"""`collsched cache` and `collsched tune`: schedule caches (docs/cache.md).

A thin layer over collsched.cache; registered by cli.py (add_parsers, COMMANDS)."""
from __future__ import annotations


def add_parsers(sub) -> None:
    """Adds this module's commands to the `collsched` parser."""


COMMANDS: dict = {}
