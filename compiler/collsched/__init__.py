"""collsched: collective-communication schedule compiler for MPI.

The public Python API (docs/python-api.md), in a few lines::

    import collsched
    res = collsched.compile_schedule("ring", 16, "64KiB", output="ring.sched")
    sched, violations = collsched.verify_file("ring.sched")
    sched, per_iteration, mean, _ = collsched.simulate_file("ring.sched")

The names of __all__ are loaded on first use (module __getattr__, PEP 562): `import
collsched` stays as cheap as it was (the pipeline pulls in numpy and every algorithm),
and since a name resolves only after this module has run, the core modules that import
`__version__` from here form no import-time cycle with it.
"""
# The one version string: pyproject.toml reads it (dynamic version), the Makefile passes it
# to the runtime's pkg-config file, and every schedule file's header records it.
__version__ = "0.1.0"

# public name -> (module, attribute)
_API = {
    "compile_schedule": ("pipeline", "compile_schedule"),
    "CompileResult": ("pipeline", "CompileResult"),
    "verify_file": ("pipeline", "verify_file"),
    "simulate_file": ("pipeline", "simulate_file"),
    "VerificationFailed": ("pipeline", "VerificationFailed"),
    "parse_bytes": ("pipeline", "parse_bytes_arg"),
    "load_topology": ("inputs.topology", "load_topology"),
    "load_pap": ("inputs.arrivals", "load_pap"),
    "Schedule": ("ir", "Schedule"),
    "read_schedule": ("schedfile", "read"),
    "write_schedule": ("schedfile", "write"),
    "list_directory": ("catalog", "list_directory"),
    "read_header": ("catalog", "read_header"),
    "read_trace": ("patterns.tracefile", "read_trace"),
    "analyse_trace": ("patterns.analysis", "analyse"),
    "build_cache": ("cache.build", "build_from_traces"),
    "load_cache": ("cache.store", "load_cache"),
    "tune": ("cache.tune", "tune"),
    "bundled_topologies": ("resources", "bundled_topologies"),
    "topology_path": ("resources", "topology_path"),
    "compile_intergroup": ("intergroup.compile", "compile_intergroup"),
    "Groups": ("intergroup.groups", "Groups"),
    "InterSchedule": ("intergroup.schedule", "InterSchedule"),
    "InputError": ("errors", "InputError"),
    "ScheduleFileError": ("errors", "ScheduleFileError"),
}
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    try:
        module, attr = _API[name]
    except KeyError:
        raise AttributeError(f"module 'collsched' has no attribute {name!r}") from None
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    globals()[name] = value  # once: later lookups are plain attribute reads
    return value


def __dir__():
    return sorted(set(globals()) | set(_API))
