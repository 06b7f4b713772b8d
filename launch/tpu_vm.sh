#!/usr/bin/env bash
# The same command on every worker of a Cloud TPU VM slice; rlagents.parallel.initialize sees
# the TPU environment and lets jax.distributed.initialize() detect the slice.
#
#   launch/tpu_vm.sh my-tpu us-central2-b -m experiments.distributed_smoke --workdir=gs://bucket/dsmoke
#
# Assumes the repository is checked out at the same path (REMOTE_DIR, default ~/rlagents) with
# its .venv on every worker (e.g. after `gcloud compute tpus tpu-vm scp` and a setup script).
set -euo pipefail
if [[ $# -lt 3 ]]; then echo "usage: $0 TPU_NAME ZONE PYTHON_ARGS..." >&2; exit 2; fi
tpu="$1"; zone="$2"; shift 2
remote_dir="${REMOTE_DIR:-~/rlagents}"
args="$(printf ' %q' "$@")"
exec gcloud compute tpus tpu-vm ssh "${tpu}" --zone="${zone}" --worker=all --command \
  "cd ${remote_dir} && PYTHONPATH=\$PWD .venv/bin/python${args}"
