"""Errors that reach the user as one line: which file, which field, what was expected.

Library functions raise these (or return them, for verification); the CLI turns them into
exit codes: 2 for bad input, 1 for a schedule that fails verification.
"""
from __future__ import annotations


class InputError(Exception):
    """Bad user input: a file, one field in it, and what was expected there."""

    def __init__(self, source: str, field: str, expected: str):
        self.source, self.field, self.expected = str(source), field, expected
        super().__init__(self.line())

    def line(self) -> str:
        where = f"{self.source}: {self.field}" if self.field else self.source
        return f"{where}: {self.expected}"


class ScheduleFileError(InputError):
    """A schedule file that is corrupt, truncated, or of another format."""
