#!/bin/bash
# The body both sbatch templates share: one `lit-coderl fit` task per device via srun, in a fixed
# run directory, resuming from the newest checkpoint. Variables (all optional):
#   CONFIG   the lit-coderl config                      (default configs/grpo_mbpp.yaml)
#   RUN_DIR  trainer.default_root_dir, fixed across requeues (default runs/$SLURM_JOB_NAME)
#   PYTHON   the interpreter with lit-coderl installed   (default python)
# Extra arguments go to `lit-coderl fit` (e.g. --trainer.max_steps 1000).
set -euo pipefail
CONFIG=${CONFIG:-configs/grpo_mbpp.yaml}
RUN_DIR=${RUN_DIR:-runs/${SLURM_JOB_NAME}}
PYTHON=${PYTHON:-python}
mkdir -p "$RUN_DIR"

# Resume from the newest checkpoint in the run dir. After SIGUSR1 (sbatch --signal) Lightning
# wrote $RUN_DIR/hpc_ckpt_N.ckpt and requeued the job; after a crash or a node failure there is
# only ModelCheckpoint's last.ckpt. Passing the newest explicitly covers both (and a crash after
# an earlier requeue, where Lightning on its own would pick the older hpc checkpoint).
latest=$(find "$RUN_DIR" \( -name 'hpc_ckpt_*.ckpt' -o -name last.ckpt \) -printf '%T@ %p\n' 2>/dev/null |
  sort -n | tail -n 1 | cut -d' ' -f2-)
resume=()
if [ -n "$latest" ]; then resume=(--ckpt_path "$latest"); fi
echo "lit-coderl: $(date -Is) job ${SLURM_JOB_ID} restart ${SLURM_RESTART_COUNT:-0}:" \
  "${SLURM_NNODES} node(s) x ${SLURM_NTASKS_PER_NODE} task(s), run dir ${RUN_DIR}," \
  "resume from ${latest:-nothing (fresh start)}"

# num_nodes/devices from the allocation: Lightning's SLURMEnvironment refuses a mismatch.
srun --kill-on-bad-exit=1 "$PYTHON" -m lit_codeRL.cli fit --config "$CONFIG" \
  --trainer.num_nodes "$SLURM_NNODES" --trainer.devices "$SLURM_NTASKS_PER_NODE" \
  --trainer.default_root_dir "$RUN_DIR" "${resume[@]}" "$@"
