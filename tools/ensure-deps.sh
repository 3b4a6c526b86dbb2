#!/usr/bin/env bash
# Installs what collsched needs and is missing: Debian packages (Open MPI, SimGrid, a C
# compiler, python3-venv) and a Python virtual environment in .venv with the package and
# its test dependencies. Idempotent: a second run only checks.
#
# COLLSCHED_NO_SYSTEM_PACKAGES=1 skips the Debian packages (so does a machine without
# apt-get, or a non-root user without sudo): one line says what was not installed and what
# will not be built; the Python side is installed and `make` builds what the present tools
# allow (the runtime tests skip what is missing).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
need_apt=()
command -v mpicc  >/dev/null 2>&1 || need_apt+=(openmpi-bin libopenmpi-dev)
command -v smpicc >/dev/null 2>&1 || need_apt+=(libsimgrid-dev)
command -v cc     >/dev/null 2>&1 || need_apt+=(build-essential)
# Debian splits venv (and its ensurepip) out of python3: check it works, not that it exists.
if [ ! -x .venv/bin/python ] && ! "$PY" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  need_apt+=(python3-venv)
fi

if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; why=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  if [ -n "${COLLSCHED_NO_SYSTEM_PACKAGES:-}" ] && [ "${COLLSCHED_NO_SYSTEM_PACKAGES}" != 0 ]; then
    why="COLLSCHED_NO_SYSTEM_PACKAGES is set"
  elif ! command -v apt-get >/dev/null 2>&1; then
    why="apt-get not found"
  elif [ -n "$SUDO" ] && ! command -v sudo >/dev/null 2>&1; then
    why="not root and no sudo"
  fi
  if [ -n "$why" ]; then
    skipped=("")
    case " ${need_apt[*]} " in *" libopenmpi-dev "*) skipped+=("the MPI runtime (build/lib, collsched-run)");; esac
    case " ${need_apt[*]} " in *" libsimgrid-dev "*) skipped+=("the SimGrid lab (build/smpi)");; esac
    case " ${need_apt[*]} " in *" build-essential "*) skipped+=("the compiler's C kernels");; esac
    not_built=""
    for s in "${skipped[@]}"; do [ -n "$s" ] || continue; not_built+="${not_built:+; }$s"; done
    echo "ensure-deps: $why: not installing ${need_apt[*]}; not built: ${not_built:-nothing}"
  else
    echo "ensure-deps: installing Debian packages: ${need_apt[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
  fi
fi

if [ ! -x .venv/bin/python ]; then
  echo "ensure-deps: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.collsched-deps
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "ensure-deps: installing Python packages into .venv"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e ".[test]"
  touch "$stamp"
fi
