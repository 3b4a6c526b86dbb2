"""collsched: collective-communication schedule compiler for MPI."""
# The one version string: pyproject.toml reads it (dynamic version), the Makefile passes it
# to the runtime's pkg-config file, and every schedule file's header records it.
__version__ = "0.1.0"
