"""The cache directory's lock (docs/cache.md, "Locking and atomicity"): `flock` on
DIR/.lock, exclusive for writers (build, tune, eviction), shared for readers."""
from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path

from ..errors import InputError

LOCK_NAME = ".lock"


@contextmanager
def locked(directory, exclusive: bool):
    """Hold DIR/.lock (created if missing) for the block: exclusive or shared. Blocks
    until granted. InputError when DIR is not a directory or the lock cannot be opened."""
    d = Path(directory)
    if not d.is_dir():
        raise InputError(str(d), "", "expected a schedule cache directory")
    path = d / LOCK_NAME
    flags = os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | (os.O_RDWR if exclusive else os.O_RDONLY)
    fd = None
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        # A reader of a read-only cache without a lock file: nobody can write it either.
        if exclusive or not isinstance(e, PermissionError):
            raise InputError(str(path), "", f"cannot open the cache's lock file ({e.strerror})") from None
    try:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        if fd is not None:
            os.close(fd)  # releases the lock
