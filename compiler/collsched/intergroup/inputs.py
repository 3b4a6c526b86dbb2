"""The inputs of an intergroup compile: the two groups' shape (--groups P:Q) and every
rank's block size (--bytes, --bytes-b, --sizes equal|arithmetic|FILE), checked strictly.

Bad input raises one InputError naming the option or file, the field and what was
expected. A size file is YAML with two lists of byte counts, `a:` (p entries) and `b:`
(q entries); a count is an integer or a size with a unit ("64KiB").
"""
from __future__ import annotations

import os
import re

from ..errors import InputError
from ..inputs.schemas import describe, read_yaml
from ..inputs.units import MAX_BYTES, parse_bytes
from .groups import Groups
from .sizes import arithmetic_sizes, equal_sizes

MAX_GROUP = 1 << 23  # ranks per group: p + q stays within the schedule format's 2^24
SIZE_RULES = ("equal", "arithmetic")
_GROUPS = re.compile(r"([0-9]+):([0-9]+)", re.ASCII)

_COUNTS = {"type": "array", "minItems": 1,
           "items": {"type": ["integer", "string"],
                     "x-expect": "expected a byte count (an integer, or a size such as 64KiB)"},
           "x-expect": "expected a list of byte counts, one per rank of the group"}
SIZES_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "collsched intergroup block sizes",
    "type": "object",
    "x-expect": "expected a mapping with lists a: and b: of byte counts",
    "properties": {"name": {"type": "string"}, "description": {"type": "string"},
                   "a": _COUNTS, "b": _COUNTS},
    "required": ["a", "b"],
    "additionalProperties": False,
}


def parse_groups(text: str | None) -> tuple[int, int]:
    """--groups P:Q: ranks of group A and of group B, each 1..MAX_GROUP."""
    if text is None:
        raise InputError("--groups", "", "expected P:Q, the ranks of group A and of group B "
                                         "(required for intercommunicator collectives)")
    m = _GROUPS.fullmatch(str(text).strip())
    if not m or not all(1 <= int(x) <= MAX_GROUP for x in m.groups()):
        raise InputError("--groups", str(text), f"expected P:Q with integers 1..{MAX_GROUP}")
    return int(m.group(1)), int(m.group(2))


def parse_block(text: str, flag: str) -> int:
    """One block size in bytes (units allowed); a MIN:MAX range is refused: an intergroup
    schedule is compiled for exact sizes."""
    if ":" in str(text):
        raise InputError(flag, str(text), "expected one size: an intergroup schedule is compiled "
                                          "for exact block sizes, not a MIN:MAX range")
    try:
        n = parse_bytes(str(text))
    except ValueError as e:
        raise InputError(flag, str(text), f"expected bytes per rank ({e})") from None
    if not 0 <= n <= MAX_BYTES:
        raise InputError(flag, str(text), f"expected 0..{MAX_BYTES} bytes")
    return n


def load_sizes(path: str, p: int, q: int) -> Groups:
    """Block sizes from a YAML file with lists a: (p counts) and b: (q counts)."""
    doc = read_yaml(path, SIZES_SCHEMA)
    lists = []
    for key, n in (("a", p), ("b", q)):
        items = doc.data[key]
        if len(items) != n:
            raise doc.fail([key], f"expected {n} byte counts (--groups {p}:{q}), got {len(items)}")
        sizes = []
        for i, v in enumerate(items):
            try:
                k = v if isinstance(v, int) else parse_bytes(v)
            except ValueError as e:
                raise doc.fail([key, i], f"expected a byte count ({e})") from None
            if not 0 <= k <= MAX_BYTES:
                raise doc.fail([key, i], f"expected a byte count 0..{MAX_BYTES}, got {describe(v)}")
            sizes.append(k)
        if sum(sizes) > MAX_BYTES:
            raise doc.fail([key], f"expected at most {MAX_BYTES} bytes in all for the group")
        lists.append(tuple(sizes))
    return Groups(*lists)


def groups_from_options(groups: str | None, nbytes: str | None, nbytes_b: str | None,
                        sizes: str | None, collective: str) -> Groups:
    """The Groups an intergroup compile is for, from the CLI's options (module docstring).

    inter-allgather: one size per group (--bytes, --bytes-b), --sizes equal at most.
    inter-allgatherv: --sizes equal (the same), arithmetic (rank i of a group contributes
    (i + 1) times its group's size: docs/intergroup.md), or a size file, which gives every
    block: then --bytes-b is refused, and --bytes, when given (the compile command requires
    it), must be the file's largest block, as the schedule's header states it."""
    p, q = parse_groups(groups)
    rule = "equal" if sizes is None else sizes
    if collective == "inter-allgather" and rule != "equal":
        raise InputError("--sizes", rule, "expected equal (or nothing) for inter-allgather, "
                                          "whose blocks are one size per group; use inter-allgatherv")
    if rule in SIZE_RULES:
        if nbytes is None:
            raise InputError("--bytes", "", "expected the bytes per rank of group A")
        ka = parse_block(nbytes, "--bytes")
        kb = ka if nbytes_b is None else parse_block(nbytes_b, "--bytes-b")
        make = equal_sizes if rule == "equal" else arithmetic_sizes
        sizes_a, sizes_b = make(p, ka), make(q, kb)
        for flag, s in (("--bytes", sizes_a), ("--bytes-b", sizes_b)):
            if sum(s) > MAX_BYTES:
                raise InputError(flag, str(s[0]), f"expected at most {MAX_BYTES} bytes in all per group")
        return Groups(sizes_a, sizes_b)
    if not os.path.lexists(rule):
        raise InputError("--sizes", rule, "expected equal, arithmetic or a YAML file of block sizes "
                                          "(no such file)")
    if nbytes_b is not None:
        raise InputError("--bytes-b", str(nbytes_b), f"expected no --bytes-b with a size file "
                                                     f"({rule} gives every block)")
    g = load_sizes(rule, p, q)
    if nbytes is not None:
        largest = max(g.sizes_a + g.sizes_b)
        if parse_block(nbytes, "--bytes") != largest:
            raise InputError("--bytes", str(nbytes), f"expected the largest block of {rule}, "
                                                     f"{largest} bytes (a size file gives every block)")
    return g
