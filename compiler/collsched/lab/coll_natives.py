"""`native:NAME` for alltoall, bcast, reduce and allreduce: one vocabulary on both backends
(docs/collectives.md, "The lab"; the allgather vocabulary is native.py's).

Each collective has its table: a canonical name (or an alias) names one algorithm of the
MPI library, and each backend maps it to its own: SimGrid 3.32's `--cfg=smpi/<coll>:NAME`
under SMPI, Open MPI 4.1's tuned id (`--mca coll_tuned_use_dynamic_rules 1 --mca
coll_tuned_<coll>_algorithm N`) under real MPI. The names are SimGrid's own lists (what
`--cfg=smpi/<coll>:help` prints: "Valid algorithms: ...", checked on 2026-11-27) and
Open MPI's (`ompi_info --all`, coll_tuned_<coll>_algorithm's "Valid values").

Selectors let a library's decision rules pick: `native:ompi`, `native:mpich`,
`native:mvapich2`, `native:impi` under SMPI (`smpi/coll-selector:NAME`), `native:default`
SMPI's default algorithm of that collective (`smpi/<coll>:default`); under real MPI only
`ompi`, Open MPI's own tuned decision (the same as plain `native`).
"""
from __future__ import annotations

from .. import errors
from .native import Native

COLLECTIVES = ("alltoall", "bcast", "reduce", "allreduce")

# collective -> canonical -> (SimGrid's name or None, Open MPI's tuned id or None)
ALGORITHMS: dict[str, dict[str, tuple[str | None, int | None]]] = {
    "alltoall": {
        "linear": ("basic_linear", 1),  # every send and receive posted at once
        "pairwise": ("pair", 2),  # step i: exchange with rank r xor i (SMPI), r +- i (Open MPI)
        "bruck": ("bruck", 3),  # Open MPI: modified Bruck
        "linear_sync": (None, 4),
        "two_proc": (None, 5),
        "ring": ("ring", None),
        "pair_light_barrier": ("pair_light_barrier", None),
        "pair_one_barrier": ("pair_one_barrier", None),
        "pair_mpi_barrier": ("pair_mpi_barrier", None),
        "pair_rma": ("pair_rma", None),
        "ring_light_barrier": ("ring_light_barrier", None),
        "ring_one_barrier": ("ring_one_barrier", None),
        "ring_mpi_barrier": ("ring_mpi_barrier", None),
        "rdb": ("rdb", None),
        "2dmesh": ("2dmesh", None),
        "3dmesh": ("3dmesh", None),
        "mvapich2_scatter_dest": ("mvapich2_scatter_dest", None),
    },
    "bcast": {
        "linear": ("flattree", 1),
        "chain": (None, 2),
        "pipeline": ("ompi_pipeline", 3),
        "split_binary_tree": ("ompi_split_bintree", 4),
        "binary_tree": (None, 5),
        "binomial": ("binomial_tree", 6),
        "knomial": ("mvapich2_knomial_intra_node", 7),
        "scatter_allgather": ("scatter_rdb_allgather", 8),
        "scatter_allgather_ring": ("scatter_LR_allgather", 9),
        "arrival_pattern_aware": ("arrival_pattern_aware", None),
        "arrival_pattern_aware_wait": ("arrival_pattern_aware_wait", None),
        "arrival_scatter": ("arrival_scatter", None),
        "flattree_pipeline": ("flattree_pipeline", None),
        "NTSB": ("NTSB", None),
        "NTSL": ("NTSL", None),
        "NTSL_Isend": ("NTSL_Isend", None),
        "SMP_binary": ("SMP_binary", None),
        "SMP_binomial": ("SMP_binomial", None),
        "SMP_linear": ("SMP_linear", None),
        "mvapich2_inter_node": ("mvapich2_inter_node", None),
        "mvapich2_intra_node": ("mvapich2_intra_node", None),
    },
    "reduce": {
        "linear": ("ompi_basic_linear", 1),
        "chain": ("ompi_chain", 2),
        "pipeline": ("ompi_pipeline", 3),
        "binary": ("ompi_binary", 4),
        "binomial": ("binomial", 5),
        "in_order_binary": ("ompi_in_order_binary", 6),
        "rabenseifner": ("rab", 7),
        "ompi_binomial": ("ompi_binomial", None),
        "arrival_pattern_aware": ("arrival_pattern_aware", None),
        "flat_tree": ("flat_tree", None),
        "NTSL": ("NTSL", None),
        "scatter_gather": ("scatter_gather", None),
        "mvapich2_knomial": ("mvapich2_knomial", None),
        "mvapich2_two_level": ("mvapich2_two_level", None),
    },
    "allreduce": {
        "linear": (None, 1),
        "nonoverlapping": ("redbcast", 2),  # reduce, then bcast
        "recursive_doubling": ("rdb", 3),
        "ring": ("lr", 4),  # reduce-scatter and allgather on a logical ring
        "segmented_ring": ("ompi_ring_segmented", 5),
        "rabenseifner": ("rab", 6),
        "rab1": ("rab1", None),
        "rab2": ("rab2", None),
        "rab_rdb": ("rab_rdb", None),
        "smp_binomial": ("smp_binomial", None),
        "smp_binomial_pipeline": ("smp_binomial_pipeline", None),
        "smp_rdb": ("smp_rdb", None),
        "smp_rsag": ("smp_rsag", None),
        "smp_rsag_lr": ("smp_rsag_lr", None),
        "smp_rsag_rab": ("smp_rsag_rab", None),
        "mvapich2_rs": ("mvapich2_rs", None),
        "mvapich2_two_level": ("mvapich2_two_level", None),
    },
}
# Other spellings (SimGrid's and Open MPI's own names) of the same algorithms.
ALIASES: dict[str, dict[str, str]] = {
    "alltoall": {"basic_linear": "linear", "pair": "pairwise", "modified_bruck": "bruck"},
    "bcast": {"basic_linear": "linear", "flattree": "linear", "ompi_pipeline": "pipeline",
              "ompi_split_bintree": "split_binary_tree", "binomial_tree": "binomial",
              "scatter_rdb_allgather": "scatter_allgather", "scatter_LR_allgather": "scatter_allgather_ring"},
    "reduce": {"ompi_basic_linear": "linear", "ompi_chain": "chain", "ompi_pipeline": "pipeline",
               "ompi_binary": "binary", "ompi_in_order_binary": "in_order_binary", "rab": "rabenseifner"},
    "allreduce": {"redbcast": "nonoverlapping", "rdb": "recursive_doubling", "lr": "ring",
                  "ompi_ring_segmented": "segmented_ring", "rab": "rabenseifner"},
}
# SimGrid 3.32 throws (std::invalid_argument) for these at a P that is not a power of two.
SMPI_POW2 = {"alltoall": {"pair", "pair_light_barrier", "pair_one_barrier", "pair_mpi_barrier", "pair_rma"}}
SELECTORS = {"smpi": ("ompi", "mpich", "mvapich2", "impi", "default"), "mpi": ("ompi",)}


def max_id(collective: str) -> int:
    return max(i for _, i in ALGORITHMS[collective].values() if i is not None)


def offers(collective: str, backend: str) -> str:
    """What native:NAME takes for `collective` on `backend` (messages, docs)."""
    smpi = backend == "smpi"
    names = []
    for name, (sg, ompi) in ALGORITHMS[collective].items():
        if (sg if smpi else ompi) is None:
            continue
        names.append("/".join([name] + [a for a, c in ALIASES[collective].items() if c == name]))
    if not smpi:
        names.append(f"0..{max_id(collective)}")
    return f"{', '.join(names)}; selectors {', '.join(SELECTORS[backend])}"


def _refuse(collective: str, full: str, why: str) -> errors.InputError:
    return errors.InputError("--algorithms", f"{full}: {why}",
                             f"{collective}: mpi offers {offers(collective, 'mpi')}; "
                             f"smpi offers {offers(collective, 'smpi')}")


def _mca(collective: str, n: int) -> dict:
    return {"coll_tuned_use_dynamic_rules": "1", f"coll_tuned_{collective}_algorithm": str(n)}


def check_ranks(collective: str, name: str, backend: str, ranks: int) -> None:
    """One InputError when the backend's algorithm cannot run on `ranks` ranks."""
    chosen = resolve(collective, name, backend)
    sg = (chosen.smpi_cfg or "").rpartition(":")[2]
    if backend == "smpi" and sg in SMPI_POW2.get(collective, ()) and ranks & (ranks - 1):
        raise errors.InputError("--algorithms", name, f"a power-of-two --ranks (SimGrid's {collective} {sg} "
                                                      f"refuses {ranks} ranks)")


def resolve(collective: str, name: str, backend: str) -> Native:
    """native:NAME (or NAME) of `collective` for `backend`; one InputError listing what both
    backends offer else. Plain `native` runs the library's own choice (nothing told)."""
    if collective not in COLLECTIVES:
        raise errors.InputError("--collective", collective, f"expected one of {', '.join(COLLECTIVES)}")
    if backend not in SELECTORS:
        raise errors.InputError("--backend", backend, "expected smpi or mpi")
    if name == "native":
        return Native("native", backend, None)
    full = name if name.startswith("native:") else f"native:{name}"
    algo = full[len("native:"):]
    if algo in SELECTORS[backend]:
        if backend == "mpi":
            return Native(algo, backend, None, algo)  # Open MPI's tuned decision, as `native`
        cfg = (f"--cfg=smpi/{collective}:default" if algo == "default"
               else f"--cfg=smpi/coll-selector:{algo}")
        return Native(algo, backend, None, algo, smpi_cfg=cfg)
    if algo in SELECTORS["smpi"]:
        raise _refuse(collective, full, f"a selector of --backend smpi, not on --backend {backend}")
    if backend == "mpi" and algo.isascii() and algo.isdigit():
        if len(algo) > 3 or int(algo) > max_id(collective):
            raise _refuse(collective, full, f"expected a tuned id 0..{max_id(collective)}")
        return Native(algo, backend, None, mca=_mca(collective, int(algo)))
    canonical = ALIASES[collective].get(algo, algo)
    if canonical not in ALGORITHMS[collective]:
        raise _refuse(collective, full, f"not a native:NAME of {collective} either backend knows")
    sg, ompi = ALGORITHMS[collective][canonical]
    if backend == "smpi":
        if sg is None:
            raise _refuse(collective, full, "not on --backend smpi")
        return Native(algo, backend, canonical, smpi_cfg=f"--cfg=smpi/{collective}:{sg}")
    if ompi is None:
        raise _refuse(collective, full, "not on --backend mpi")
    return Native(algo, backend, canonical, mca=_mca(collective, ompi))


def is_native(name: str) -> bool:
    return name == "native" or name.startswith("native:")
