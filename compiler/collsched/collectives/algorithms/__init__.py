"""Algorithms for alltoall, bcast, reduce and allreduce: one module per family, each
registering its builders in registry.REGISTRY by (collective, name). Importing this
package registers them all."""
from . import registry  # noqa: F401
from .registry import REGISTRY, CollAlgorithm, CollRequest, generate, names, register

# Each family module registers on import (added as they land).
_FAMILIES = ("alltoall", "alltoall_grid", "bcast", "reduce", "allreduce", "allreduce_grid",
             "arrival_trees")


def _load_families() -> None:
    import importlib
    for fam in _FAMILIES:
        try:
            importlib.import_module(f"{__name__}.{fam}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{fam}":
                raise


_load_families()

__all__ = ["REGISTRY", "CollAlgorithm", "CollRequest", "generate", "names", "register"]
