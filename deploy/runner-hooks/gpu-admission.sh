#!/usr/bin/env bash
# Job-started hook for self-hosted GPU runners: refuses a job whose workflow a pull request
# could have changed, unless it is the run a maintainer approved: that pull request's own
# pull_request run of a GPU workflow file the approval covers, open at the approved head,
# started by the approver (a re-run: by gpu-watchdog or someone with the re-run role).
#
#   ACTIONS_RUNNER_HOOK_JOB_STARTED=/opt/gpu-ci/gpu-admission.sh   (the runner's environment)
#   GPU_CI_ADMISSION_TOKEN_FILE=/run/gpu-ci/admission/token   a file holding a fine-grained
#       token (read: commit statuses, pull requests, actions, metadata), the runner user's;
#       read and removed before anything else, so the job's steps never see it (one job per
#       ephemeral pod: deploy/arc copies it from a Secret with an init container).
#   GPU_CI_ADMISSION_TOKEN=<token>   only where no file can be used (a persistent runner):
#       the job's steps inherit the runner's environment and can read it
#   GPU_CI_ALLOWED_WORKFLOWS=.github/workflows/cuda-ci.yml   the GPU workflow files
#   GPU_CI_GATE_LABELS=CUDA CI            the labels that approve (the gate's, a comment relay's):
#                                         set it, or a `labeled` run of any label is admitted
#   GPU_CI_APPROVAL_CONTEXT=GPU CI        (default) the status gpu-status writes
#   GPU_CI_RELAY_LOGINS=<bot>[bot]        bots whose label relays a comment approval
#   GPU_CI_RERUN_PERMISSION=write         (default) the least role whose re-run is admitted
#
# The runner runs this file with `bash -e` before the job's first step; a non-zero exit fails
# the job without running it. The rules: gpu_ci.github.admission (README, "Runner admission").
set -euo pipefail
python="${GPU_CI_PYTHON:-/opt/gpu-ci/venv/bin/python}"
if [ ! -x "$python" ]; then
  echo "::error title=GPU runner admission::no Python for the admission check at $python: set GPU_CI_PYTHON (refusing the job)."
  exit 1
fi
exec "$python" -I -m gpu_ci.commands.runner_admission
