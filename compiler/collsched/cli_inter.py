"""`collsched compile|show|simulate|plot` for intergroup schedules (two groups of an
intercommunicator; docs/intergroup.md): thin layers over collsched.intergroup.

cli.py dispatches here: compile with --collective inter-*, the others for a file of
collective 3 or 4 (docs/schedule-format.md#intergroup-schedules). UNDER CONSTRUCTION
(issue 19): being built now; the commands below are its seams."""
from __future__ import annotations

from .errors import InputError


def is_inter_file(path) -> bool:
    """True if `path` is a schedule file of an intergroup collective (header field
    `collective` 3 or 4); False for anything else (the caller's own reader reports it)."""
    import struct

    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return False
    return len(head) == 20 and head[:8] == b"COLLSCHD" and struct.unpack_from("<I", head, 16)[0] in (3, 4)


def cmd_compile(a) -> int:
    raise InputError("--collective", a.collective, "not built yet (issue 19 in progress)")


def cmd_show(a, s) -> int:
    raise InputError(a.file, "collective", "not built yet (issue 19 in progress)")


def cmd_simulate(a) -> int:
    raise InputError(a.file, "collective", "not built yet (issue 19 in progress)")


def cmd_plot(a) -> int:
    raise InputError(a.file, "collective", "not built yet (issue 19 in progress)")
