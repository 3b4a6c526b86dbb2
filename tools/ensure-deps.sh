#!/usr/bin/env bash
# Installs what collsched needs and is missing: Debian packages (Open MPI, SimGrid) and a
# Python virtual environment in .venv with the package and its test dependencies.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v mpicc  >/dev/null 2>&1 || need_apt+=(openmpi-bin libopenmpi-dev)
command -v smpicc >/dev/null 2>&1 || need_apt+=(libsimgrid-dev)
command -v cc     >/dev/null 2>&1 || need_apt+=(build-essential)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "ensure-deps: installing Debian packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
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
