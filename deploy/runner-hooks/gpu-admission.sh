#!/usr/bin/env bash
# Job-started hook for self-hosted GPU runners: refuses a job whose workflow a pull request
# could have changed, unless a maintainer approved the pull request's head (issue 26).
#
#   ACTIONS_RUNNER_HOOK_JOB_STARTED=/opt/gpu-ci/gpu-admission.sh   (the runner's environment)
#   GPU_CI_ADMISSION_TOKEN=<token>       read commit statuses (fine-grained: "Commit statuses: read")
#   GPU_CI_ALLOWED_WORKFLOWS=.github/workflows/cuda-ci.yml   admitted from the default branch
#   GPU_CI_APPROVAL_CONTEXT=GPU CI        (default) the status gpu-status writes
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
