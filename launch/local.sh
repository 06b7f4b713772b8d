#!/usr/bin/env bash
# One process on this machine: the main job (SFT -> GRPO -> evaluation) with any extra flags.
#
#   launch/local.sh --workdir=/tmp/rlagents_calc
#   launch/local.sh --workdir=/tmp/smoke --config=experiments/configs/calculator.py:smoke
#
# PYTHON picks the interpreter (default: the repository's .venv, else python3). Started again
# with the same --workdir, the job resumes from its newest checkpoint.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-}"
if [[ -z "${python}" ]]; then
  if [[ -x "${root}/.venv/bin/python" ]]; then python="${root}/.venv/bin/python"; else python=python3; fi
fi
cd "${root}"
exec "${python}" -m experiments.train_agent "$@"
