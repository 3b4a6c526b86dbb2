"""Keeps docs/benchmarks.md generated: each benchmark owns one marked section.

A benchmark writes its measured figures as Markdown and calls `replace_section`; the text
between `<!-- BEGIN name -->` and `<!-- END name -->` is replaced (appended if new), the
rest of the page is kept. Nobody edits the numbers by hand.

Command line: python -m collsched.lab.benchdoc DOC SECTION MARKDOWN_FILE
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from ..errors import InputError
from ..files import read_input, write_atomic

HEADER = ("# Benchmarks\n\nEvery figure on this page is written by a benchmark "
          "(`make bench`); the section markers tell which. Do not edit numbers by hand.\n")


def replace_section(doc: str | os.PathLike, name: str, markdown: str) -> None:
    path = Path(doc)
    text = HEADER
    if path.exists():  # read_input: a regular file only, never /dev/zero or a FIFO
        try:
            text = read_input(path, "Markdown page").decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(str(path), "", "expected a UTF-8 Markdown page") from None
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    block = f"{begin}\n{markdown.rstrip()}\n{end}"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    write_atomic(path, text)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: python -m collsched.lab.benchdoc DOC SECTION MARKDOWN_FILE")
    replace_section(sys.argv[1], sys.argv[2], Path(sys.argv[3]).read_text())
