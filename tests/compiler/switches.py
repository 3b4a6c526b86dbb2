"""Context managers the tests use to switch one implementation for another."""
from contextlib import contextmanager

from collsched import native


@contextmanager
def setting(module, name, value):
    """module.name = value for the block (e.g. a size limit that picks a fast path)."""
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


def kernels(on: bool):
    """The native kernels on or off (off: the Python reference paths) for the block."""
    return setting(native, "ENABLED", on)
