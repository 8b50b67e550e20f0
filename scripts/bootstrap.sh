#!/usr/bin/env bash
# Bootstrap gpu-ci for a composite action: find a Python >= 3.9, preferably not a (possibly
# read-only) vendor conda's, which only ever creates a venv; then let bootstrap.py create, or
# verify and reuse, a virtual environment with the dependency groups that <action> needs
# (dependencies only: the action runs this checkout's src/ through scripts/run.py). Later
# actions of this checkout in the job see GPU_CI_PYTHON and skip the work when their groups
# are already there.
# Usage: bootstrap.sh <action>
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
action="${1:-all}"

# BEGIN groups (rendered from src/gpu_ci/specs.py by scripts/render_actions.py)
case "$action" in
  gpu-gate|gpu-spend|gpu-status|gpu-watchdog|remove-label) groups="base github" ;;
  gpu-lease|verify-cuda-env) groups="base nvml" ;;
  gpu-monitor) groups="base nvml github monitor" ;;
  setup-conda-from-lock) groups="base conda" ;;
  *) groups="base github nvml conda monitor" ;;
esac
# END groups

if [ -n "${GPU_CI_PYTHON:-}" ] && [ "${GPU_CI_ROOT:-}" = "$root" ] && [ -x "$GPU_CI_PYTHON" ]; then
  venv="$(dirname "$(dirname "$GPU_CI_PYTHON")")"
  missing=""
  for group in $groups; do
    [ -f "$venv/.gpu-ci-group-$group" ] || missing="$missing $group"
  done
  if [ -z "$missing" ]; then
    echo "gpu-ci: reusing $GPU_CI_PYTHON (bootstrapped earlier in this job)"
    exit 0
  fi
fi

# Every Python started here runs isolated (-I: no PYTHONPATH, user site or script directory)
# and from /, so nothing in the job's workspace runs in it.
usable() {  # <python> [any]: 3.9 or newer, and outside a conda installation unless "any"
  (cd / && "$1" -I - "${2:-}" <<'PY' 2>/dev/null
import os, sys
conda = any(os.path.isdir(os.path.join(p, "conda-meta")) for p in {sys.prefix, sys.base_prefix})
sys.exit(0 if sys.version_info >= (3, 9) and (not conda or sys.argv[1:] == ["any"]) else 1)
PY
  )
}

candidates=()
[ -n "${GPU_CI_BOOTSTRAP_PYTHON:-}" ] && candidates+=("$GPU_CI_BOOTSTRAP_PYTHON")
[ -n "${pythonLocation:-}" ] && candidates+=("$pythonLocation/bin/python3" "$pythonLocation/python.exe")
candidates+=(python3 python)
# Absolute fallbacks for when a vendor conda shadows every python on PATH.
read -r -a fallbacks <<< "${GPU_CI_BOOTSTRAP_FALLBACKS-/usr/bin/python3 /usr/local/bin/python3}"
candidates+=("${fallbacks[@]}")

find_python() {  # [any]: the first usable candidate
  local cand path
  for cand in "${candidates[@]}"; do
    path="$(command -v "$cand" 2>/dev/null)" || continue
    if usable "$path" "${1:-}"; then echo "$path"; return 0; fi
  done
}

python="$(find_python)"
if [ -z "$python" ]; then
  # Only a conda installation's Python (RAPIDS' images): it creates the bootstrap's own venv,
  # which is all it is used for. Nothing is installed into that conda, and no second Python.
  python="$(find_python any)"
  if [ -n "$python" ]; then
    echo "gpu-ci bootstrap: no Python >= 3.9 outside a conda installation; $python creates" \
         "the bootstrap's own venv (nothing is installed into that conda)."
  fi
fi

no_python() {
  echo "::error title=gpu-ci bootstrap::No Python >= 3.9 found" \
       "(tried: ${candidates[*]}).${provision_error:+ Installing one failed: $provision_error}" \
       "Add 'uses: actions/setup-python@v5' with 'python-version: \"3.12\"' before this" \
       "action, or, in a Linux container job, choose how the bootstrap installs one (input" \
       "install-python: auto, system or managed; see the README's container section)."
  exit 1
}

if [ -z "$python" ]; then
  # No Python (a `container:` image such as nvidia/cuda:*-base): bring one as the
  # `install-python` input says (scripts/provision-python.sh; Linux only).
  # shellcheck source=provision-python.sh
  . "$root/scripts/provision-python.sh"
  provision_python
fi
[ -n "$python" ] || no_python

cd /
exec "$python" -I "$root/scripts/bootstrap.py" "$action"
