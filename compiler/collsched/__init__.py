"""collsched: collective-communication schedule compiler for MPI."""
__version__ = "0.1.0"
