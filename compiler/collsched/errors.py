"""Errors that reach the user as one line: which file, which field, what was expected.

Library functions raise these (or return them, for verification); the CLI turns them into
exit codes: 2 for bad input, 1 for a schedule that fails verification.

The line is always one short line: newlines and control characters become spaces or '?',
and each part is cut to an excerpt (a 10 MB string in a YAML field, or a huge number,
never reaches the terminal whole).
"""
from __future__ import annotations

import re

# Longest source (a path: up to 1024 characters shown whole), field and explanation shown.
_LIMITS = (1024, 160, 400)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def excerpt(text, limit: int) -> str:
    """`text` on one line, at most `limit` characters: the head and tail of a longer one."""
    text = " ".join(str(text).split())
    text = _CONTROL.sub("?", text)
    if len(text) <= limit:
        return text
    keep = limit - 5
    return f"{text[:keep - keep // 3]} ... {text[len(text) - keep // 3:]}"


class InputError(Exception):
    """Bad user input: a file, one field in it, and what was expected there."""

    def __init__(self, source: str, field: str, expected: str):
        self.source, self.field, self.expected = (
            excerpt(part, limit) for part, limit in zip((source, field, expected), _LIMITS))
        super().__init__(self.line())

    def line(self) -> str:
        where = f"{self.source}: {self.field}" if self.field else self.source
        return f"{where}: {self.expected}"


class ScheduleFileError(InputError):
    """A schedule file that is corrupt, truncated, or of another format."""


class OutputError(InputError, OSError):
    """An output that cannot be written: not a regular file, no such directory, no space
    left. An InputError (one line, exit 2) and an OSError (errno, when known)."""

    def __init__(self, source: str, field: str, expected: str, err: int | None = None):
        InputError.__init__(self, source, field, expected)
        self.errno = err
