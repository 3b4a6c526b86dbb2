"""`native:NAME`: one vocabulary for the MPI library's own allgather algorithms on both
backends (docs/lab.md, "native:NAME").

A canonical name (`ring`, `bruck`, `recursive_doubling`, `neighbor`, `linear`, ...) or an
alias (`rdb`, `ompi_neighborexchange`, `GB`, ...) names one algorithm; each backend maps it
to its own: SimGrid 3.32's `smpi/allgather` name under SMPI, Open MPI 4.1's
`coll_tuned_allgather_algorithm` id under real MPI. A selector (`native:ompi`,
`native:mpich`, ...) lets a library's decision rules pick: under SMPI SimGrid's
`smpi/coll-selector`; under real MPI only `ompi`, Open MPI's own tuned decision (the same as
`native`). A name one backend lacks is one InputError that lists what each backend offers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import InputError

# canonical name -> (SimGrid's smpi/allgather name or None, Open MPI's tuned id or None).
ALGORITHMS: dict[str, tuple[str | None, int | None]] = {
    "linear": ("GB", 1),  # gather to rank 0, then broadcast (both libraries)
    "bruck": ("bruck", 2),
    "recursive_doubling": ("rdb", 3),
    "ring": ("ring", 4),
    "neighbor": ("ompi_neighborexchange", 5),
    "two_proc": (None, 6),  # Open MPI: two ranks only
    "pair": ("pair", None),
    "2dmesh": ("2dmesh", None),
    "3dmesh": ("3dmesh", None),
    "loosely_lr": ("loosely_lr", None),
    "NTSLR": ("NTSLR", None),
    "NTSLR_NB": ("NTSLR_NB", None),
    "rhv": ("rhv", None),
    "SMP_NTS": ("SMP_NTS", None),
    "smp_simple": ("smp_simple", None),
    "spreading_simple": ("spreading_simple", None),
    "mvapich2_smp": ("mvapich2_smp", None),
    "default": ("default", None),  # SimGrid's default allgather
}
# other names of the same algorithms (SimGrid's and Open MPI's own spellings)
ALIASES = {"rdb": "recursive_doubling", "ompi_neighborexchange": "neighbor", "GB": "linear"}
# selectors: a library's decision rules pick the algorithm per call
SELECTORS = {"smpi": ("ompi", "mpich", "mvapich2", "impi"), "mpi": ("ompi",)}
BACKENDS = ("smpi", "mpi")
MAX_TUNED_ID = max(i for _, i in ALGORITHMS.values() if i is not None)  # 0: the tuned decision


@dataclass(frozen=True)
class Native:
    """What native:NAME runs on one backend."""

    name: str  # as the user gave it (after `native:`)
    backend: str
    canonical: str | None  # None for a selector or an Open MPI id given as a number
    selector: str | None = None
    smpi_cfg: str | None = None  # SMPI: the --cfg option
    mca: dict = field(default_factory=dict)  # real MPI: Open MPI's MCA parameters

    def describe(self) -> str:
        """One phrase for reports: what the backend was told."""
        if self.smpi_cfg:
            return self.smpi_cfg.removeprefix("--cfg=")
        if self.mca:
            return " ".join(f"{k}={v}" for k, v in self.mca.items())
        return "Open MPI's own tuned decision"


def offers(backend: str) -> str:
    """What native:NAME takes on `backend`, for messages and docs."""
    smpi = backend == "smpi"
    names = []
    for name, (sg, ompi) in ALGORITHMS.items():
        if (sg if smpi else ompi) is None:
            continue
        names.append("/".join([name] + [a for a, c in ALIASES.items() if c == name]))
    if not smpi:
        names.append(f"0..{MAX_TUNED_ID}")
    return f"{', '.join(names)}; selector{'s' * (len(SELECTORS[backend]) > 1)} " + \
        ", ".join(SELECTORS[backend])


def _refuse(full: str, backend: str, why: str) -> InputError:
    return InputError("--algorithms", f"{full}: {why}", f"mpi offers {offers('mpi')}; "
                                                        f"smpi offers {offers('smpi')}")


def resolve(name: str, backend: str) -> Native:
    """native:NAME (or NAME) for `backend`; one InputError listing both backends' names else."""
    if backend not in BACKENDS:
        raise InputError("--backend", backend, "expected smpi or mpi")
    full = name if name.startswith("native:") else f"native:{name}"
    algo = full[len("native:"):]
    if algo in SELECTORS[backend]:
        if backend == "smpi":
            return Native(algo, backend, None, algo, smpi_cfg=f"--cfg=smpi/coll-selector:{algo}")
        return Native(algo, backend, None, algo)  # Open MPI's tuned decision, as `native`
    if algo in SELECTORS["smpi"]:
        raise _refuse(full, backend, f"a selector of --backend smpi, not on --backend {backend}")
    if backend == "mpi" and algo.isascii() and algo.isdigit():
        if len(algo) > 3 or int(algo) > MAX_TUNED_ID:
            raise _refuse(full, backend, f"expected a tuned id 0..{MAX_TUNED_ID}")
        return Native(algo, backend, None, mca={"coll_tuned_use_dynamic_rules": "1",
                                                "coll_tuned_allgather_algorithm": str(int(algo))})
    canonical = ALIASES.get(algo, algo)
    if canonical not in ALGORITHMS:
        raise _refuse(full, backend, "not a native:NAME either backend knows")
    sg, ompi = ALGORITHMS[canonical]
    if backend == "smpi":
        if sg is None:
            raise _refuse(full, backend, "not on --backend smpi")
        return Native(algo, backend, canonical, smpi_cfg=f"--cfg=smpi/allgather:{sg}")
    if ompi is None:
        raise _refuse(full, backend, "not on --backend mpi")
    return Native(algo, backend, canonical, mca={"coll_tuned_use_dynamic_rules": "1",
                                                 "coll_tuned_allgather_algorithm": str(ompi)})


def check_names(algorithms, backend: str) -> None:
    """Every native:NAME of `algorithms` resolved for `backend` (one InputError else)."""
    for name in algorithms:
        if name.startswith("native:"):
            resolve(name, backend)
