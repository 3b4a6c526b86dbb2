"""Context managers the tests use to switch one implementation for another."""
from contextlib import contextmanager

from collsched import kernels


@contextmanager
def setting(module, name, value):
    """module.name = value for the block (e.g. a size limit that picks a fast path)."""
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


def c_kernels(on: bool):
    """The C kernels on or off (off: the compiler's Python paths) for the block."""
    return setting(kernels, "ENABLED", on)


def _time_by_reference(plan, base):
    from collsched.model.dag import _PyGraph
    return _PyGraph(plan).time(base)


def dag_reference():
    """Plans without the kernels timed by the C kernel's Python reference (model.dag._PyGraph)
    instead of the numpy waves, for the block."""
    from collsched.model.dag import Plan
    return setting(Plan, "_time_waves", _time_by_reference)
