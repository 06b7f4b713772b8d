#!/usr/bin/env bash
# N processes on this machine joined by jax.distributed, with a real coordinator on localhost.
#
#   launch/multiprocess_local.sh 2 -m experiments.distributed_smoke --workdir=/tmp/dsmoke
#
# Each process gets RLAGENTS_COORDINATOR / RLAGENTS_NUM_PROCESSES / RLAGENTS_PROCESS_ID (read by
# rlagents.parallel.initialize) and logs to <log dir>/process_<i>.log (LOG_DIR, default a temp
# dir). PORT picks the coordinator port (default 12355); PYTHON the interpreter. Exits non-zero
# if any process fails.
set -euo pipefail
if [[ $# -lt 2 ]]; then echo "usage: $0 NUM_PROCESSES PYTHON_ARGS..." >&2; exit 2; fi
num="$1"; shift
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-}"
if [[ -z "${python}" ]]; then
  if [[ -x "${root}/.venv/bin/python" ]]; then python="${root}/.venv/bin/python"; else python=python3; fi
fi
log_dir="${LOG_DIR:-$(mktemp -d)}"
mkdir -p "${log_dir}"
cd "${root}"
pids=()
for ((i = 0; i < num; i++)); do
  RLAGENTS_COORDINATOR="localhost:${PORT:-12355}" RLAGENTS_NUM_PROCESSES="${num}" \
    RLAGENTS_PROCESS_ID="${i}" PYTHONPATH="${root}${PYTHONPATH:+:${PYTHONPATH}}" \
    "${python}" "$@" >"${log_dir}/process_${i}.log" 2>&1 &
  pids+=($!)
done
status=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "process ${i} failed; see ${log_dir}/process_${i}.log" >&2; status=1
  fi
done
echo "logs: ${log_dir}"
exit "${status}"
