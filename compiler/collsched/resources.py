"""What collsched ships besides its Python code, and where it is: the bundled topologies and
the runtime's C sources, in a source checkout or in an installed package (docs/install.md).

A source checkout (this file at <root>/compiler/collsched/, <root>/runtime/runtime.mk
beside) uses its own topologies/ and runtime/; an installed package (a wheel, `pip
install .`) has copies of both in collsched/data/, put there by setup.py. Every other
module asks here.

A topology argument that names no existing file but a bundled topology - `NAME`,
`NAME.yaml` or `topologies/NAME.yaml` - is the bundled copy (`topology_path`, used by the
topology loader): the CLI's defaults (`topologies/tryton-48.yaml`) work from any directory.
"""
from __future__ import annotations

import os
from pathlib import Path

from . import __version__

PACKAGE = Path(__file__).resolve().parent
DATA = PACKAGE / "data"  # an installed package's copies (setup.py)
BUNDLED_DIR_NAME = "topologies"


def source_root() -> Path | None:
    """The root of the source checkout this package runs from, or None (installed)."""
    root = PACKAGE.parents[1]
    if PACKAGE.parent.name == "compiler" and (root / "runtime" / "runtime.mk").is_file():
        return root
    return None


def topologies_dir() -> Path:
    """The directory of the bundled topologies."""
    root = source_root()
    return root / BUNDLED_DIR_NAME if root is not None else DATA / BUNDLED_DIR_NAME


def bundled_topologies() -> list[str]:
    """The bundled topologies' names (file stems), sorted."""
    d = topologies_dir()
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


def bundled_topology(name: str) -> Path | None:
    """The bundled topology `name` (as `tryton-48`), or None if there is none."""
    if not name or "/" in name or "\\" in name or name.startswith("."):
        return None
    path = topologies_dir() / f"{name}.yaml"
    return path if path.is_file() else None


def topology_path(path):
    """`path` itself when it is an existing file (or not a bundled name); else the bundled
    topology it names: `NAME`, `NAME.yaml` or `topologies/NAME.yaml` (relative)."""
    text = os.fspath(path)
    if not text or os.path.exists(text):
        return path
    parts = Path(os.path.normpath(text)).parts
    if len(parts) == 2 and parts[0] == BUNDLED_DIR_NAME and parts[1].endswith(".yaml"):
        name = parts[1][:-len(".yaml")]
    elif len(parts) == 1:
        name = parts[0][:-len(".yaml")] if parts[0].endswith(".yaml") else parts[0]
    else:
        return path
    found = bundled_topology(name)
    return str(found) if found is not None else path


def runtime_sources() -> Path | None:
    """The runtime's source tree (runtime.mk, src/, include/, lab/, measure/), or None when
    this installation has none."""
    root = source_root()
    d = root / "runtime" if root is not None else DATA / "runtime"
    return d if (d / "runtime.mk").is_file() else None


def cache_dir() -> Path:
    """This version's user cache directory: ${XDG_CACHE_HOME:-~/.cache}/collsched/VERSION
    (XDG_CACHE_HOME counts only when absolute, as the XDG spec says)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    return root / "collsched" / __version__
