"""Every action in one table: its inputs, defaults, outputs, command module and the
dependency groups it installs.

``action.yml`` files, the CLI's flags and subcommands, the bootstrap's groups (``bootstrap.py``
reads them, ``bootstrap.sh``'s ``case`` is rendered from them) and the READMEs' tables are
views of these specs; tests keep every view in agreement, so a new action or input is added
here first. Standard library only: the bootstrap imports it before any dependency exists.
"""

from __future__ import annotations

from typing import NamedTuple

# The specs are NamedTuples, not frozen dataclasses: every action imports them, and a frozen
# dataclass costs ~1.3 ms to create (Python 3.11), a NamedTuple ~0.2 ms.


class InputSpec(NamedTuple):
    name: str
    description: str
    default: str = ""
    """The default the CLI applies when neither a flag nor ``INPUT_<NAME>`` is given."""
    action_default: str | None = None
    """The default written in ``action.yml`` when it differs (e.g. ``${{ github.token }}``)."""
    required: bool = False
    off: bool = False
    """The input may be turned off: ``none`` (any case) means empty (``gpu_ci.inputs.OFF``),
    as an empty ``with:`` value falls back to the default through the action."""

    @property
    def env_name(self) -> str:
        """``INPUT_<NAME>``: upper case, ``-`` → ``_`` (how the composite actions pass it)."""
        return "INPUT_" + self.name.upper().replace("-", "_").replace(" ", "_")

    @property
    def yaml_default(self) -> str:
        return self.default if self.action_default is None else self.action_default


class OutputSpec(NamedTuple):
    name: str
    description: str


#: Every dependency group, in install order: ``requirements/<group>.txt`` (hash-pinned).
GROUPS: tuple[str, ...] = ("base", "github", "nvml", "conda", "monitor", "cloud")


class ActionSpec(NamedTuple):
    name: str
    summary: str
    inputs: tuple[InputSpec, ...]
    outputs: tuple[OutputSpec, ...]
    module: str = ""
    """The module defining ``run(inputs, rt) -> int`` (default: ``gpu_ci.commands.<name>``)."""
    groups: tuple[str, ...] = ("base",)
    """The dependency groups the bootstrap installs for this action (see ``GROUPS``)."""
    runs_on: str = ""
    """Where the action belongs, for the README's overview (e.g. ``GPU runner``)."""
    steps_before: str = ""
    """Composite steps (YAML, indented as under ``runs.steps``) between the bootstrap and the
    command, e.g. restoring a cache with a pinned action; they read inputs via ``env:``."""
    steps_after: str = ""
    """Composite steps after the command (the command's step has ``id: run``)."""

    @property
    def command_module(self) -> str:
        return self.module or "gpu_ci.commands." + self.name.replace("-", "_")

    def input(self, name: str) -> InputSpec:
        for spec in self.inputs:
            if spec.name == name:
                return spec
        raise KeyError(name)


#: gpu-status's and gpu-watchdog's: whose "GPU CI" statuses are believed (one text for both).
TRUSTED_CREATORS = InputSpec(
    "trusted-creators",
    "Logins whose statuses in `context` count, "
    "comma-separated: the account the inert workflows post as (a status from any "
    "other writer, e.g. a CI app a pull request can steer, is ignored). Name "
    "your App's bot (`my-app[bot]`) if they post with an App token.",
    "github-actions[bot]",
)


#: gpu-status's and gpu-watchdog's: the comment relay's account, whose run is the approver's.
RELAY_BOT = InputSpec(
    "relay-bot",
    "With the comment relay: the account whose label relays a comment approval (the "
    "App's '<slug>[bot]', as gpu-gate's relay-bot); the run it starts counts as the "
    "approver's.",
    "",
)


#: Inputs of the shared bootstrap step, which every action runs first (their commands ignore
#: them). ``install-python``, not ``python``: verify-cuda-env's ``python`` names the
#: interpreter it checks.
BOOTSTRAP_INPUTS: tuple[InputSpec, ...] = (
    InputSpec(
        "install-python",
        "When the job has no Python >= 3.9 (e.g. a container: image): auto (uv when on "
        "PATH, else as root the image's package manager, else a pinned, sha256-checked "
        "uv installs a managed Python), system (the package manager only) or managed "
        "(uv only). Linux only; nothing is installed where a Python exists.",
        "auto",
    ),
)

_TOKEN_HELP = (
    "Token for the GitHub REST API. The CLI falls back to the GITHUB_TOKEN environment variable."
)

GPU_GATE = ActionSpec(
    name="gpu-gate",
    summary="Decide whether a GPU job runs: only for the commit a maintainer approved.",
    groups=("base", "github"),
    runs_on="CPU runner (decides)",
    inputs=(
        InputSpec(
            "label",
            "Label that approves a GPU run (compared case-insensitively); none: labels "
            "approve nothing (comment commands or trusted authors only).",
            "CUDA CI",
            off=True,
        ),
        InputSpec("github-token", _TOKEN_HELP, "", action_default="${{ github.token }}"),
        InputSpec(
            "min-permission",
            "Least role the labeller needs: triage, write, maintain or admin.",
            "write",
        ),
        InputSpec(
            "approvers",
            "Logins, and @org for an organisation's members, who approve besides those with "
            "min-permission (comma- or space-separated; org membership is read through the "
            "API: GITHUB_TOKEN sees public members only).",
            "",
        ),
        InputSpec(
            "run-on",
            "Comma-separated events that run without a label.",
            "push,schedule,workflow_dispatch,merge_group",
        ),
        InputSpec(
            "require-fresh-head",
            "Refuse when the PR head moved after the label was applied.",
            "true",
        ),
        InputSpec(
            "paths",
            "Newline-separated glob patterns (! excludes): run only if the change "
            "touches a matching file.",
            "",
        ),
        InputSpec("skip-draft", "Do not run for draft pull requests.", "false"),
        InputSpec(
            "gpu-runs-on",
            "runs-on value for the GPU job (plain label or JSON): your GPU "
            "runners' labels or group. No default: empty leaves the runs-on output empty "
            "when run is true.",
            "",
        ),
        InputSpec("cpu-runs-on", "runs-on value when the GPU job does not run.", "ubuntu-latest"),
        InputSpec(
            "monthly-budget",
            "GPU budget per calendar month (UTC): '$50' / '50 USD', or '3000 minutes'. "
            "Empty: no budget check.",
            "",
        ),
        InputSpec(
            "gpu-price",
            "Price of a GPU minute: an amount (0.052, 3.12/h) or a GitHub-hosted GPU "
            "SKU (linux_4_core_gpu, windows_4_core_gpu), priced per day from a dated "
            "table.",
            "",
        ),
        InputSpec(
            "reserve-minutes",
            "What one GPU run may cost, in minutes (usually the GPU job's "
            "timeout-minutes); also counted for GPU jobs still running.",
            "60",
        ),
        InputSpec(
            "budget-on-unknown", "When the spend cannot be read: refuse (default) or run.", "refuse"
        ),
        InputSpec(
            "billing-token",
            "Token that may read the organization's billing usage report; empty: "
            "count this repository's GPU jobs with github-token (actions: read).",
            "",
        ),
        InputSpec(
            "budget-scope",
            "With billing-token: repository (this repository's GPU usage) or "
            "organization (all of it).",
            "repository",
        ),
        InputSpec(
            "gpu-workflows",
            "Deprecated, ignored with a warning: the budget counts the GPU jobs of every workflow.",
            "",
        ),
        InputSpec(
            "budget-ledger",
            "Name of the ledger artifact gpu-spend writes on the default branch, "
            "which keeps a decision to a few API calls; none: count every run.",
            "gpu-spend-ledger",
            off=True,
        ),
        InputSpec(
            "context",
            "gpu-status's `context`: a fork run's GPU job waiting for a runner reserves "
            "budget only when its head carries an approval in it, by `trusted-creators`.",
            "GPU CI",
        ),
        TRUSTED_CREATORS,
        InputSpec(
            "require-approved-review",
            "Also require an APPROVED review of the commit that runs, by someone with "
            "min-permission or higher.",
            "false",
        ),
        InputSpec(
            "comment-command",
            "Off unless set (e.g. '/gpu-ci run'). On issue_comment: a new comment on a pull "
            "request whose first line is this command and the head's SHA ('/gpu-ci run "
            "<sha> [tier ...]'), by someone with min-permission, is relayed as relay-label "
            "with relay-token; the pull_request labeled run re-reads it and runs.",
            "",
        ),
        InputSpec(
            "relay-token",
            "With comment-command, in the issue_comment workflow: a token that can start "
            "workflows (a GitHub App installation token or a fine-grained PAT, "
            "pull-requests: write) that applies relay-label. Empty: commands approve nothing.",
            "",
        ),
        InputSpec(
            "relay-bot",
            "With comment-command: the login whose relay-label counts (the App's "
            "'<slug>[bot]' or the PAT's user), and only with a command for the head.",
            "",
        ),
        InputSpec(
            "relay-label",
            "With comment-command: the label the relay applies (default: label); required "
            "when label is none. Only relay-bot may apply it.",
            "",
        ),
        InputSpec(
            "tiers",
            "Words a comment command may name beside the SHA (e.g. 'mini, full'), "
            "separated by commas, spaces or lines; 'tier: kind kind' makes a tier select "
            "those gpu-runner-kinds (e.g. 'mini: t4, rocm: mi300'). Or 'file:<path>', a "
            "file of the default branch in the same form, read through the API (contents: "
            "read). The named ones become the tiers, selected-kinds and tier-kinds outputs.",
            "",
        ),
        InputSpec(
            "trusted-authors",
            "Least role (triage, write, maintain, admin) of a pull request's author whose "
            "own commits run on opened/synchronize/reopened without an approval. Empty: off.",
            "",
        ),
        InputSpec(
            "trusted-authors-verified",
            "With trusted-authors: also require GitHub's signature verification of the head.",
            "false",
        ),
        InputSpec(
            "test-merge",
            "Run a pull request's merge commit (refs/pull/N/merge) instead of its head: sha "
            "becomes the merge commit GitHub prepared, once its parents are the base's current "
            "commit and the approved head (else the gate refuses).",
            "false",
        ),
        InputSpec(
            "gpu-runner-kinds",
            "Named GPU runner kinds, a JSON object: each a label, a list of labels or "
            '{"group": ..., "labels": [...], "price": "3.12/h"} (the budget counts each '
            "kind at its price). Jobs index the runs-on-kinds output by kind. "
            '{"label-prefix": "gpu-ci-", "price": ...} counts the jobs that ask for a label '
            "with that prefix (gpu-cloud-runner's VMs); such a kind has no runs-on.",
            "",
        ),
    )
    + BOOTSTRAP_INPUTS,
    outputs=(
        OutputSpec("run", "'true' when the GPU job should run, else 'false'."),
        OutputSpec("reason", "One sentence explaining the decision."),
        OutputSpec("sha", "The exact commit to check out."),
        OutputSpec(
            "head-sha",
            "The approved pull request head (with test-merge, the second parent of sha).",
        ),
        OutputSpec("pr-number", "Pull request number, empty for other events."),
        OutputSpec(
            "labeled-by", "Login of the approver: who applied the label or wrote the comment."
        ),
        OutputSpec("permission", "The approver's role on the repository."),
        OutputSpec(
            "approval",
            "When run is true: label, comment or trusted-author (empty for run-on events).",
        ),
        OutputSpec("tiers", "JSON array of the tiers the comment named ([] otherwise)."),
        OutputSpec("runs-on", "JSON runs-on value: the GPU value when run is true, else the CPU."),
        OutputSpec(
            "runs-on-kinds",
            "With gpu-runner-kinds: a JSON object of kind to runs-on (the CPU value for "
            "every kind when run is false), e.g. fromJSON(...)[matrix.kind].",
        ),
        OutputSpec("kinds", "With gpu-runner-kinds: a JSON array of the kind names."),
        OutputSpec(
            "selected-kinds",
            "With gpu-runner-kinds: a JSON array of the kinds to run, for strategy.matrix: "
            "the named tiers' kinds, every kind when no tier selects kinds, [] when run is "
            "false. The budget reserves these only.",
        ),
        OutputSpec(
            "matrix",
            'With gpu-runner-kinds: {"include": [{"kind": ..., "runs-on": ...}]} of the '
            "selected kinds, for strategy.matrix (a job reads matrix.runs-on).",
        ),
        OutputSpec(
            "tier-kinds",
            "JSON object of each named tier to the kinds it selects ({} unless run is true).",
        ),
        OutputSpec(
            "relayed", "On issue_comment: the label a valid command was relayed as, else empty."
        ),
        OutputSpec("base-ref", "The branch the pull request targets; empty for other events."),
        OutputSpec(
            "budget-spent", "GPU spend this month before this run (USD or minutes, as the budget)."
        ),
        OutputSpec("budget-left", "Budget left before this run's reservation."),
    ),
)

REMOVE_LABEL = ActionSpec(
    name="remove-label",
    summary="Take the gate label off a pull request again, safely and idempotently.",
    groups=("base", "github"),
    runs_on="CPU runner (`pull_request_target`)",
    inputs=(
        InputSpec("labels", "Labels to remove, newline- or comma-separated.", "CUDA CI"),
        InputSpec("github-token", _TOKEN_HELP, "", action_default="${{ github.token }}"),
        InputSpec("number", "Issue or pull request number (default: taken from the event).", ""),
        InputSpec("repository", "owner/name (default: GITHUB_REPOSITORY).", ""),
        InputSpec("fail-on-error", "Fail the step when a label cannot be removed.", "true"),
    )
    + BOOTSTRAP_INPUTS,
    outputs=(
        OutputSpec("removed", "JSON array of the labels that were removed."),
        OutputSpec("absent", "JSON array of the labels that were not on the pull request."),
    ),
)

#: actions/cache, pinned by commit (v4.2.3); restore and save are its sub-actions.
ACTIONS_CACHE_SHA = "5a3ec84eff668545956fd18022155c47e93e2684"

_CONDA_CACHE_BEFORE = f"""\
    - name: Cache key and path of the package cache or the environment
      id: cache-plan
      if: inputs.cache != 'false'
      shell: bash
      env:
        CACHE: ${{{{ inputs.cache }}}}
        INPUT_LOCK_FILE: ${{{{ inputs.lock-file }}}}
        INPUT_PLATFORM: ${{{{ inputs.platform }}}}
        INPUT_ENGINE: ${{{{ inputs.engine }}}}
        INPUT_MINIFORGE: ${{{{ inputs.miniforge }}}}
        INPUT_MINIFORGE_VERSION: ${{{{ inputs.miniforge-version }}}}
        INPUT_CATEGORIES: ${{{{ inputs.categories }}}}
        INPUT_PIXI_ENVIRONMENT: ${{{{ inputs.pixi-environment }}}}
        VERSION: ${{{{ inputs.miniforge-version }}}}
        ROOT: ${{{{ inputs.root }}}}
        PKGS: ${{{{ inputs.pkgs-dir }}}}
        PREFIX: ${{{{ inputs.prefix }}}}
        NAME: ${{{{ inputs.environment-name }}}}
      run: |
        # true: the package cache; environment: the finished environment. Anything else fails
        # here, before a restore is skipped in silence (the command refuses it as well).
        case "$(printf '%s' "$CACHE" | tr '[:upper:]' '[:lower:]')" in
          true) mode=packages ;;
          environment) mode=environment ;;
          false|"") exit 0 ;;
          *) got="${{CACHE//%/%25}}"; got="${{got//$'\\r'/%0D}}"; got="${{got//$'\\n'/%0A}}"
             echo "::error title=setup-conda-from-lock::input 'cache' of setup-conda-from-lock" \\
                  "must be one of true, false, environment; got '$got'."
             exit 2 ;;
        esac
        base="${{RUNNER_TOOL_CACHE:-${{RUNNER_TEMP:-$HOME/.cache/gpu-ci}}}}"
        root="${{ROOT:-$base/miniforge3/$VERSION}}"
        fresh=true
        if [ "$mode" = packages ]; then
          path="${{PKGS:-$root/pkgs}}"
          # Restore only into an absent or empty package cache: never over one in use (a
          # persistent self-hosted runner keeps its own cache and needs none).
          [ -d "$path" ] && [ -n "$(ls -A "$path")" ] && fresh=false
        else
          # The prefix the command will use (conda/options.py). An environment is valid only
          # at its own path (prefix placeholders), so the path's hash is in the key; no
          # restore-keys (another lock's environment is of no use); restored only into an
          # absent or empty directory, never through a link.
          path="${{PREFIX:-$root/envs/${{NAME:-ci}}}}"
          case "$path" in *$'\\n'*|*$'\\r'*)
            echo "::error title=setup-conda-from-lock::the environment's path has a line break."
            exit 2 ;;
          esac
          [ -L "$path" ] && fresh=false
          [ -e "$path" ] && [ ! -d "$path" ] && fresh=false
          [ -d "$path" ] && [ -n "$(ls -A "$path")" ] && fresh=false
        fi
        # The keys: gpu_ci.conda.cachekey, as for the command's cache-key output.
        keys=$("$GPU_CI_PYTHON" "$GITHUB_ACTION_PATH/../../scripts/conda_cache_key.py" \\
          "$mode" "$path") || exit 1
        {{ echo "mode=$mode"
          echo "$keys"
          echo "path=$path"
          echo "fresh=$fresh"; }} >> "$GITHUB_OUTPUT"
    - name: Restore the package cache
      id: cache-restore
      if: inputs.cache == 'true' && steps.cache-plan.outputs.fresh == 'true'
      uses: actions/cache/restore@{ACTIONS_CACHE_SHA}  # v4.2.3
      with:
        path: |
          ${{{{ steps.cache-plan.outputs.path }}}}
          !${{{{ steps.cache-plan.outputs.path }}}}/archives
          !${{{{ steps.cache-plan.outputs.path }}}}/.work-*
        key: ${{{{ steps.cache-plan.outputs.key }}}}
        restore-keys: ${{{{ steps.cache-plan.outputs.restore-prefix }}}}
    - name: Restore the environment
      id: cache-restore-env
      if: inputs.cache == 'environment' && steps.cache-plan.outputs.fresh == 'true'
      uses: actions/cache/restore@{ACTIONS_CACHE_SHA}  # v4.2.3
      with:
        path: ${{{{ steps.cache-plan.outputs.path }}}}
        key: ${{{{ steps.cache-plan.outputs.key }}}}
"""

_CONDA_CACHE_AFTER = f"""\
    - name: Save the package cache
      if: >-
        inputs.cache == 'true' && inputs.cache-write == 'true' &&
        steps.cache-plan.outputs.fresh == 'true' &&
        steps.cache-restore.outputs.cache-hit != 'true'
      uses: actions/cache/save@{ACTIONS_CACHE_SHA}  # v4.2.3
      with:
        path: |
          ${{{{ steps.cache-plan.outputs.path }}}}
          !${{{{ steps.cache-plan.outputs.path }}}}/archives
          !${{{{ steps.cache-plan.outputs.path }}}}/.work-*
        key: ${{{{ steps.cache-plan.outputs.key }}}}
    - name: Save the environment
      # Only an environment this command created (success, not reused) after a miss: a
      # composite step's if: implies success() too, but say it where it matters.
      if: >-
        inputs.cache == 'environment' && inputs.cache-write == 'true' &&
        steps.cache-plan.outputs.fresh == 'true' &&
        steps.cache-restore-env.outputs.cache-hit != 'true' &&
        steps.run.outcome == 'success' && steps.run.outputs.reused == 'false'
      uses: actions/cache/save@{ACTIONS_CACHE_SHA}  # v4.2.3
      with:
        path: ${{{{ steps.cache-plan.outputs.path }}}}
        key: ${{{{ steps.cache-plan.outputs.key }}}}
"""

SETUP_CONDA_FROM_LOCK = ActionSpec(
    name="setup-conda-from-lock",
    summary="Create a conda environment from a lock file, no solver (Miniforge only if needed).",
    groups=("base", "nvml", "conda"),
    runs_on="GPU runner",
    inputs=(
        InputSpec(
            "lock-file",
            "Explicit (@EXPLICIT), unified conda-lock.yml or pixi.lock lock file.",
            required=True,
        ),
        InputSpec("environment-name", "Name of the environment to create.", "ci"),
        InputSpec(
            "pixi-environment",
            "The pixi.lock environment to install (not the one to create: environment-name).",
            "default",
        ),
        InputSpec(
            "cuda-override",
            "CUDA version to assume for a pixi.lock's __cuda requirements instead of the "
            "driver's (as CONDA_OVERRIDE_CUDA), for a CPU runner that only prepares the "
            "environment.",
            "",
        ),
        InputSpec("prefix", "Absolute path of the environment (wins over environment-name).", ""),
        InputSpec(
            "platform",
            "conda subdir to install (default: the runner's), or a pixi.lock's custom "
            "platform by name.",
            "",
        ),
        InputSpec(
            "categories",
            "Comma-separated categories of a unified lock (main is always included).",
            "main",
        ),
        InputSpec(
            "miniforge",
            "auto: install Miniforge only for engine: conda (its conda creates the "
            "environment); true: install it, for conda on PATH in later steps; false: never.",
            "auto",
        ),
        InputSpec("miniforge-version", "Miniforge release to install.", "26.3.2-3"),
        InputSpec("installer-url", "Override the Miniforge installer URL (a mirror).", ""),
        InputSpec("installer-sha256", "Expected sha256 of the Miniforge installer.", ""),
        InputSpec(
            "root", "Writable Miniforge root without spaces (default: in the tool cache).", ""
        ),
        InputSpec("engine", "Installer for the locked packages: rattler or conda.", "rattler"),
        InputSpec("pkgs-dir", "Package cache directory (default: under root).", ""),
        InputSpec("activate", "Export the environment's activation to later steps.", "true"),
        InputSpec("dry-run", "Print the install plan without downloading anything.", "false"),
        InputSpec(
            "channel-mirrors",
            "Lines '<channel URL prefix> => <mirror URL prefix>': "
            "fetch packages (and the installer) from a mirror.",
            "",
        ),
        InputSpec(
            "channel-credentials",
            "Lines '<host> = bearer <token>', '<host> = basic "
            "<user>:<password>' or '<host> = token <anaconda.org token>'; sent to that "
            "host only, masked. Pass them from the secrets context.",
            "",
        ),
        InputSpec(
            "cache",
            "Restore and save with actions/cache, keyed by lock sha256, platform, engine, "
            "version and categories (or pixi environment): true (the package cache), "
            "environment (the finished environment, at its own path) or false.",
            "false",
        ),
        InputSpec(
            "cache-write",
            "Save the cache after a miss (false: only restore, e.g. on pull requests).",
            "true",
        ),
        InputSpec(
            "stream-downloads",
            "true: rattler's client downloads and extracts each "
            "archive in one stream (fastest); false: every archive is downloaded to disk "
            "first, so a cut one resumes with HTTP Range and the log shows bytes and "
            "rate. Archives behind channel-credentials or a proxy always take the "
            "second way.",
            "true",
        ),
    )
    + BOOTSTRAP_INPUTS,
    outputs=(
        OutputSpec("prefix", "Path of the environment."),
        OutputSpec("python", "Path of the environment's interpreter, empty if none."),
        OutputSpec("conda", "Path of Miniforge's conda, empty when it was not installed."),
        OutputSpec("lock-sha256", "sha256 of the lock file."),
        OutputSpec("cache-key", "Key for actions/cache of pkgs-dir."),
        OutputSpec("packages", "Number of conda and pip entries installed."),
        OutputSpec("pypi-packages", "Number of those that are PyPI (pip) packages."),
        OutputSpec("pixi-environment", "The pixi.lock environment installed, empty for others."),
        OutputSpec("reused", "'true' when the prefix already held exactly this lock."),
    ),
    steps_before=_CONDA_CACHE_BEFORE,
    steps_after=_CONDA_CACHE_AFTER,
)

VERIFY_CUDA_ENV = ActionSpec(
    name="verify-cuda-env",
    summary="Check that the NVIDIA driver can run the job's CUDA software before tests start.",
    groups=("base", "nvml"),
    runs_on="GPU runner",
    inputs=(
        InputSpec(
            "require",
            "Constraint lines in the NVIDIA_REQUIRE_CUDA grammar (all must "
            "hold), extended with gpu-count, memory, name, quoted values "
            '(name="RTX PRO 6000") and driver=earliest.',
            "",
        ),
        InputSpec(
            "python", "Interpreter whose frameworks are checked (default: python on PATH).", ""
        ),
        InputSpec("frameworks", "Frameworks to check, comma-separated, or auto.", "auto"),
        InputSpec("deep", "Import each framework and run one tiny computation per GPU.", "false"),
        InputSpec("require-gpu", "Fail when no NVIDIA driver is visible.", "true"),
        InputSpec(
            "fail-on", "Lowest finding level that fails the step: error or warning.", "error"
        ),
        InputSpec("report-file", "Write the full report as JSON to this path.", ""),
        InputSpec(
            "health",
            "Level of GPU hardware faults (uncorrectable ECC, failed or "
            "pending row remapping): error, or warn to only report them.",
            "error",
        ),
        InputSpec(
            "cuda-from",
            "Which CUDA is judged: auto (the job's environment: its conda env, NVIDIA "
            "wheels and framework builds; the system toolkit only when none provides "
            "CUDA), env, wheels or system. Framework builds are always judged.",
            "auto",
        ),
    )
    + BOOTSTRAP_INPUTS,
    outputs=(
        OutputSpec("ok", "'true' when no finding reached the fail-on level."),
        OutputSpec("driver-version", "NVIDIA driver version."),
        OutputSpec("cuda-driver-version", "Highest CUDA version the driver supports."),
        OutputSpec("gpu-count", "Number of visible GPUs."),
        OutputSpec("gpus", "JSON list of the visible GPUs."),
        OutputSpec("frameworks", "JSON list of the CUDA consumers found."),
        OutputSpec("findings", "JSON list of {level, code, message, fix}."),
    ),
)

GPU_STATUS = ActionSpec(
    name="gpu-status",
    summary="Show the GPU CI state on the pull request's head as a commit status you can require.",
    groups=("base", "github"),
    runs_on="CPU runner (`pull_request_target`, `workflow_run`, `issue_comment`)",
    inputs=(
        InputSpec(
            "context", "Name of the commit status (what branch protection requires).", "GPU CI"
        ),
        InputSpec("label", "The gate label, named in the waiting message.", "CUDA CI"),
        InputSpec(
            "min-permission", "Least role that may approve, named in the waiting message.", "write"
        ),
        InputSpec(
            "gpu-jobs",
            "Names of the GPU workflow's GPU jobs, comma-separated "
            "(`tests` also matches matrix jobs `tests (...)`; a reusable workflow's "
            "job: `gpu / Test on GPU`).",
            "tests",
        ),
        InputSpec(
            "workflow",
            "The GPU workflow's file (`cuda-ci.yml` or "
            "`.github/workflows/cuda-ci.yml`): only its runs count (names can be "
            "claimed by any fork's workflow, file paths cannot).",
            "cuda-ci.yml",
        ),
        TRUSTED_CREATORS,
        RELAY_BOT,
        InputSpec(
            "gate-run",
            "On a label event: the `run` output of gpu-gate run in the same job (on a comment "
            "event: of the gate job).",
            "",
        ),
        InputSpec("gate-reason", "On a label event: the `reason` output of gpu-gate.", ""),
        InputSpec(
            "labeled-by",
            "On a label or comment event: the `labeled-by` output of gpu-gate (the approver).",
            "",
        ),
        InputSpec("sha", "On a comment event (`issue_comment`): the gate's `sha` output.", ""),
        InputSpec("pr-number", "On a comment event: the gate's `pr-number` output.", ""),
        InputSpec(
            "gpu-result",
            "On a comment event, in the job after the GPU job: its `needs.<job>.result`, "
            "posted over this run's own approval record only; empty: post the approval.",
            "",
        ),
        InputSpec("github-token", _TOKEN_HELP, "", action_default="${{ github.token }}"),
        InputSpec(
            "report-file",
            "On a completed run: write the GPU jobs' queue times as JSON to this path.",
            "",
        ),
        InputSpec(
            "comment",
            "true: keep one comment on the pull request, edited in place, with the head's "
            "state, how a maintainer approves and `comment-help` (needs `pull-requests: "
            "write`; only comments written by `trusted-creators` are ever edited).",
            "false",
        ),
        InputSpec(
            "comment-command",
            "The comment command the comment names beside the label (`/gpu-ci run <sha>`); "
            "empty: label only. Keep it equal to gpu-gate's `comment-command`.",
            "",
        ),
        InputSpec(
            "comment-help",
            "Markdown shown to contributors in the comment, e.g. how to run the GPU tests "
            "without a GPU (a Colab link); at most 60,000 characters.",
            "",
        ),
        InputSpec(
            "comment-on-close",
            "When the pull request closes: keep the comment, collapse it to one line, "
            "or delete it.",
            "keep",
        ),
    )
    + BOOTSTRAP_INPUTS,
    outputs=(
        OutputSpec("state", "The state posted (pending, success, failure, error), empty if none."),
        OutputSpec("description", "The description posted, or why nothing was posted."),
        OutputSpec("sha", "The commit the status was posted on."),
        OutputSpec(
            "queued-seconds", "On a completed run: the longest time a GPU job waited for a runner."
        ),
        OutputSpec(
            "comment",
            "With comment: true: created, updated, unchanged, deleted or none; else empty.",
        ),
    ),
)

GPU_WATCHDOG = ActionSpec(
    name="gpu-watchdog",
    summary="Cancel GPU jobs that no runner picked up, and record how long GPU jobs wait.",
    groups=("base", "github"),
    runs_on="CPU runner (`schedule`)",
    inputs=(
        InputSpec(
            "workflows",
            "GPU workflow file names (e.g. `cuda-ci.yml`), comma-separated; empty: every workflow.",
            "",
        ),
        InputSpec(
            "gpu-labels",
            "GPU runner labels, comma-separated: a job with any of them is watched.",
            "gpu",
        ),
        InputSpec("max-queue-minutes", "Cancel a GPU job's run when the job waited longer.", "60"),
        InputSpec(
            "schedule-minutes",
            "The watchdog's own interval (default: read from the schedule event's cron).",
            "",
        ),
        InputSpec("cancel", "Cancel the run; false only reports.", "true"),
        InputSpec(
            "context",
            "Commit status set on a cancelled run's commit; none: no status.",
            "GPU CI",
            off=True,
        ),
        InputSpec("max-calls", "Most REST calls one sweep makes.", "200"),
        InputSpec(
            "rate-reserve", "Stop when fewer REST calls than this remain in the rate limit.", "100"
        ),
        InputSpec("report-file", "Write the queue times as JSON to this path.", ""),
        InputSpec(
            "force-cancel-minutes",
            "Force-cancel a run still not cancelled this many minutes past "
            "max-queue-minutes (it ignored cancel); empty: never.",
            "",
        ),
        InputSpec(
            "retry-infra-failures",
            "Re-runs of a run's failed jobs when its GPU job was lost to infrastructure "
            "(runner lost or shut down, GPU off the bus), never for test failures; 0: off.",
            "1",
        ),
        InputSpec(
            "retry-window-hours",
            "Failed runs created this many hours back are examined (at most 720: GitHub "
            "re-runs a run only within 30 days).",
            "24",
        ),
        InputSpec(
            "monitor-artifacts",
            "Name prefix of gpu-monitor's report artifacts read for GPU-lost evidence "
            "(none: no report is read).",
            "gpu-monitor-",
            off=True,
        ),
        InputSpec(
            "machine-records",
            "Path of a JSON file of the runners' machine records kept outside the jobs "
            "(gpu-ci/machine-records/v1: cloud, ARC events, another user's hook): they "
            "rank above a job's own evidence.",
            "",
        ),
        TRUSTED_CREATORS,
        RELAY_BOT,
        InputSpec(
            "infra-file",
            "Write the GPU jobs lost to infrastructure (by pool) as JSON to this path, "
            "for gpu-spend's infra-files.",
            "",
        ),
        InputSpec(
            "monthly-budget",
            "gpu-gate's budget: a re-run whose reservation it would refuse is not made. "
            "Empty: no budget check.",
            "",
        ),
        InputSpec("gpu-runs-on", "With monthly-budget: gpu-gate's gpu-runs-on.", ""),
        InputSpec(
            "gpu-runner-kinds",
            "With monthly-budget: gpu-gate's gpu-runner-kinds (a re-run's GPU jobs reserve "
            "at the price of the kind each ran on).",
            "",
        ),
        InputSpec("gpu-price", "With monthly-budget: gpu-gate's gpu-price.", ""),
        InputSpec(
            "reserve-minutes", "What a re-run reserves per GPU job it re-runs, in minutes.", "60"
        ),
        InputSpec(
            "budget-on-unknown", "When the spend cannot be read: refuse (default) or run.", "refuse"
        ),
        InputSpec(
            "budget-ledger", "gpu-gate's budget-ledger (the ledger artifact).", "gpu-spend-ledger"
        ),
        InputSpec("github-token", _TOKEN_HELP, "", action_default="${{ github.token }}"),
    )
    + BOOTSTRAP_INPUTS,
    outputs=(
        OutputSpec("stale", "Number of GPU jobs queued longer than max-queue-minutes."),
        OutputSpec("cancelled", "JSON array of the ids of the runs cancelled."),
        OutputSpec(
            "retried", "JSON array of the ids of the runs re-run after an infrastructure loss."
        ),
        OutputSpec("max-queued-seconds", "Longest queue time among the GPU jobs seen."),
        OutputSpec("rest-calls", "REST calls the sweep made."),
        OutputSpec(
            "complete",
            "true when every queued and in-progress run was listed and "
            "examined; false when the call budget, the rate limit, an API error or "
            "GitHub's 1,000-result cap stopped the sweep short (the summary says "
            "what is incomplete).",
        ),
    ),
)

GPU_SPEND = ActionSpec(
    name="gpu-spend",
    summary="Report the month's GPU minutes and cost by workflow, pull request, approver "
    "and runner, against the budget.",
    groups=("base", "github"),
    runs_on="CPU runner (`schedule`)",
    inputs=(
        InputSpec("github-token", _TOKEN_HELP, "", action_default="${{ github.token }}"),
        InputSpec("repository", "owner/name (default: GITHUB_REPOSITORY).", ""),
        InputSpec("month", "Month to report, YYYY-MM (default: the current month, UTC).", ""),
        InputSpec("monthly-budget", "The budget line: '$50', '50 USD' or '3000 minutes'.", ""),
        InputSpec(
            "gpu-price",
            "Price of a GPU minute: an amount (0.052, 3.12/h) or a GitHub-hosted GPU "
            "SKU (linux_4_core_gpu, windows_4_core_gpu).",
            "",
        ),
        InputSpec(
            "gpu-runs-on",
            "Which jobs are GPU jobs: the runs-on labels they ask for (plain label or "
            "JSON list), or a JSON object with group for a runner group.",
            "",
        ),
        InputSpec(
            "gpu-runner-kinds",
            "gpu-gate's gpu-runner-kinds: each kind's jobs are GPU jobs, counted at the "
            "kind's price (gpu-price for a kind without one), and the report breaks the "
            "month down by kind.",
            "",
        ),
        InputSpec(
            "gpu-workflows",
            "Deprecated, ignored with a warning: gpu-spend counts the GPU jobs of every workflow.",
            "",
        ),
        InputSpec(
            "reserve-minutes", "Minutes counted for a GPU job still queued or running.", "60"
        ),
        InputSpec(
            "billing-token",
            "Token that may read the organization's billing usage report: adds "
            "GitHub's billed GPU minutes and cost beside the count from the jobs.",
            "",
        ),
        InputSpec(
            "output-dir",
            "Directory for spend.json, spend.csv and the ledger (gpu-spend-ledger.json) "
            "to upload as artifacts.",
            "gpu-spend",
        ),
        InputSpec(
            "monitor-artifacts",
            "Name prefix of the gpu-monitor report artifacts whose idle cost is added "
            "(none: no idle column, no extra API call).",
            "gpu-monitor-",
            off=True,
        ),
        InputSpec(
            "reuse-ledger",
            "Name of the ledger artifact this workflow uploads on the default branch: the "
            "runs it counted are not fetched again, so an hourly report costs a few API "
            "calls; none: count every run.",
            "gpu-spend-ledger",
            off=True,
        ),
        InputSpec(
            "max-monitor-reports",
            "At most this many gpu-monitor reports are downloaded (one API call each, "
            "the newest first).",
            "100",
        ),
        InputSpec(
            "infra-files",
            "gpu-watchdog's infra-file(s), newline- or comma-separated paths: adds the "
            "GPU minutes lost to infrastructure, by pool (no API call).",
            "",
        ),
        InputSpec(
            "cloud-artifacts",
            "Name prefix of the gpu-cloud-runner report artifacts (stop and reap) whose VM "
            "minutes and cost are shown beside the GPU jobs: boot, idle and leaked minutes "
            "included (none: not read).",
            "gpu-cloud-runner-",
            off=True,
        ),
        InputSpec(
            "max-cloud-reports",
            "At most this many gpu-cloud-runner reports are downloaded (one API call each, "
            "the newest first).",
            "100",
        ),
    )
    + BOOTSTRAP_INPUTS,
    outputs=(
        OutputSpec("minutes", "GPU minutes this month (reservations of running jobs included)."),
        OutputSpec(
            "cost",
            "GPU cost this month in USD (empty without gpu-price or a price for every kind).",
        ),
        OutputSpec("budget-left", "Budget left (USD or minutes), empty without a budget."),
        OutputSpec("json", "Path of spend.json."),
        OutputSpec("csv", "Path of spend.csv (one row per GPU job)."),
        OutputSpec("ledger", "Path of the ledger for gpu-gate's budget-ledger artifact."),
        OutputSpec(
            "vm-cost",
            "gpu-cloud-runner VMs' cost this month in USD, from their reports (information, "
            "not in cost); empty when none were read.",
        ),
    ),
)

GPU_MONITOR = ActionSpec(
    name="gpu-monitor",
    summary="Watch the job's GPUs: utilisation, memory, power, idle cost, per step, charted.",
    groups=("base", "nvml", "github", "monitor"),
    runs_on="GPU runner",
    inputs=(
        InputSpec(
            "mode",
            "start (early in the job: starts the sampler) or report (a later "
            "step with if: always(): stops it and reports).",
            required=True,
        ),
        InputSpec("interval", "Seconds between samples.", "1"),
        InputSpec(
            "price-per-hour",
            "What the runner costs: an amount per hour (3.12), per "
            "minute (0.052/min), or a GitHub-hosted GPU SKU (linux_4_core_gpu).",
            "",
        ),
        InputSpec(
            "price-per-gpu-hour",
            "What one GPU of a shared multi-GPU host costs, per hour (2.40) or minute: the job "
            "is charged it for each GPU it sees (CUDA_VISIBLE_DEVICES, e.g. from gpu-lease), "
            "idle cost per leased GPU. Not with price-per-hour.",
            "",
        ),
        InputSpec(
            "price-key",
            "With a price input that is a JSON object of prices by runner group or kind "
            '(\'{"gpu-b200": "6.50", "h100x8": "24"}\'): the key of this job\'s runner, '
            "e.g. the matrix's kind.",
            "",
        ),
        InputSpec("expect-gpu-use", "Fail the report when no process used a GPU.", "false"),
        InputSpec(
            "max-memory", "Fail the report when a GPU's peak memory is above this (e.g. 40GiB).", ""
        ),
        InputSpec(
            "min-utilisation",
            "Fail the report when a GPU's mean utilisation is below this percentage.",
            "",
        ),
        InputSpec(
            "fail-on-unknown",
            "Fail the report when min-utilisation cannot be "
            "evaluated (a GPU or MIG slice without a utilisation counter); otherwise a "
            "warning says so.",
            "false",
        ),
        InputSpec("report-file", "Where the JSON report goes (default: under RUNNER_TEMP).", ""),
        InputSpec("samples-csv", "Where the CSV samples go (default: beside report-file).", ""),
        InputSpec("pushgateway-url", "Push the job's metrics to this Prometheus Pushgateway.", ""),
        InputSpec(
            "github-token",
            "Token that reads the job's steps (actions: read) for the "
            "per-step breakdown; without it, one phase from start to report.",
            "",
            action_default="${{ github.token }}",
        ),
    )
    + BOOTSTRAP_INPUTS,
    outputs=(
        OutputSpec(
            "ok", "'true' unless an assertion (expect-gpu-use, max-memory, min-utilisation) failed."
        ),
        OutputSpec("gpu-count", "Number of GPUs watched."),
        OutputSpec("gpu-used", "'true' when a process used a GPU or a GPU was busy."),
        OutputSpec(
            "busy-seconds",
            "Seconds with a kernel running by NVML's definition "
            "(utilisation x recorded time), summed over GPUs; empty when unknown.",
        ),
        OutputSpec(
            "utilisation-mean", "Mean GPU utilisation in percent, over GPUs; empty when unknown."
        ),
        OutputSpec("peak-memory-mib", "Highest memory used on one GPU, MiB."),
        OutputSpec(
            "energy-wh",
            "Energy drawn by the GPUs, Wh (the driver's energy counter "
            "where supported); empty when unknown.",
        ),
        OutputSpec("paid-minutes", "Billed minutes of the job (whole minutes)."),
        OutputSpec("gpu-minutes-used", "Busy GPU-minutes (busy-seconds / 60); empty when unknown."),
        OutputSpec(
            "idle-fraction",
            "Share of paid GPU time in which no kernel ran (0-1); "
            "empty when a GPU has no utilisation counter or the sampler died before the "
            "report (unwatched time is not idle).",
        ),
        OutputSpec(
            "idle-cost-usd",
            "Cost of the idle share (empty without a price or when the idle fraction is unknown).",
        ),
        OutputSpec("report-file", "Path of the JSON report."),
        OutputSpec("samples-csv", "Path of the CSV samples."),
        OutputSpec("samples-file", "Path of the sampler's JSON Lines file (start)."),
        OutputSpec(
            "findings",
            "JSON list of {level, code, message}: the first 50 (errors "
            "first); the JSON report has all.",
        ),
    ),
)

GPU_LEASE = ActionSpec(
    name="gpu-lease",
    summary="Lease whole GPUs of a host shared by several runners, and spread the tests over them.",
    groups=("base", "nvml"),
    runs_on="GPU runner (self-hosted, shared host)",
    inputs=(
        InputSpec(
            "mode",
            "lease (early in the job: takes the GPUs until the job ends) or "
            "release (a later step with if: always(): gives them back now).",
            required=True,
        ),
        InputSpec("gpus", "How many whole GPUs to lease.", "1"),
        InputSpec(
            "min-free-memory",
            "Lease only GPUs with at least this much free memory (e.g. 20GiB); empty: any.",
            "",
        ),
        InputSpec(
            "wait-minutes",
            "How long to wait for GPUs to come free before failing with who holds what.",
            "10",
        ),
        InputSpec(
            "memory-per-worker",
            "Memory one pytest-xdist worker needs (e.g. 8GiB): "
            "sets xdist-workers and the worker map; empty: one worker per GPU.",
            "",
        ),
        InputSpec(
            "lease-dir",
            "The host-wide lock directory every runner of the host uses "
            "(default: GPU_CI_LEASE_DIR, else /tmp/gpu-ci-leases).",
            "",
        ),
    )
    + BOOTSTRAP_INPUTS,
    outputs=(
        OutputSpec(
            "cuda-visible-devices",
            "The leased GPUs' UUIDs, comma-separated (also "
            "exported as CUDA_VISIBLE_DEVICES, with CUDA_DEVICE_ORDER=PCI_BUS_ID).",
        ),
        OutputSpec("gpu-uuids", "JSON list of the leased GPUs' UUIDs."),
        OutputSpec("xdist-workers", "pytest-xdist workers the leased GPUs hold (pytest -n)."),
        OutputSpec(
            "worker-devices",
            "JSON object worker (gw0, gw1, ...) -> GPU UUID; also "
            "exported as GPU_CI_WORKER_DEVICES (UUIDs by worker number).",
        ),
    ),
)

_CLOUD_TOKEN = InputSpec(
    "github-token",
    "A token that may manage the repository's self-hosted runners: a GitHub App's "
    "installation token (Administration: write) or a fine-grained token. The job's "
    "GITHUB_TOKEN cannot register runners.",
    "",
    action_default="${{ github.token }}",
)
_CLOUD_REGION = InputSpec("region", "The AWS region.", "us-east-1")
_CLOUD_JOB_KEY = InputSpec(
    "job-key",
    "Names this VM among the run's cloud runners (lower case, digits, -; at most 16): "
    "start, stop and the GPU job's label agree on it.",
    "gpu",
)
_CLOUD_GROUPS = ("base", "github", "cloud")
#: The default image: AWS's Deep Learning Base AMI (NVIDIA driver, Docker, NVIDIA Container
#: Toolkit) on Ubuntu 22.04, through AWS's public SSM parameter.
DLAMI_PARAMETER = (
    "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
)

GPU_CLOUD_RUNNER = ActionSpec(
    name="gpu-cloud-runner",
    summary="Start an ephemeral cloud GPU VM as a just-in-time runner for one job: spot "
    "first, within the budget, never leaked.",
    module="gpu_ci.commands.gpu_cloud_runner",
    groups=_CLOUD_GROUPS,
    runs_on="CPU runner (before the GPU job)",
    inputs=(
        _CLOUD_TOKEN,
        _CLOUD_REGION,
        InputSpec(
            "instance-types",
            "EC2 instance types to try, in order, comma- or newline-separated (g5.xlarge, "
            "g4dn.xlarge).",
            required=True,
        ),
        InputSpec("subnets", "Subnet ids to try, one per availability zone.", required=True),
        InputSpec(
            "security-group", "The VM's security group id (outbound HTTPS only).", required=True
        ),
        InputSpec(
            "image",
            "An AMI id, or ssm:<parameter> naming one (default: AWS's Deep Learning Base "
            "AMI with NVIDIA's driver, Ubuntu 22.04).",
            "ssm:" + DLAMI_PARAMETER,
        ),
        InputSpec(
            "market",
            "spot-then-on-demand (a re-run, attempt 2 or later, goes on-demand), spot or "
            "on-demand.",
            "spot-then-on-demand",
        ),
        InputSpec(
            "max-minutes",
            "The VM's hard lifetime: it powers itself off (and is terminated) after this; "
            "the reaper ends it past this too.",
            "120",
        ),
        InputSpec("idle-minutes", "Power off when no job has started this long after boot.", "15"),
        InputSpec(
            "launch-timeout",
            "Seconds the launch walk may take (at most 600, within the reaper's grace); "
            "no new candidate is tried after them.",
            "300",
        ),
        InputSpec(
            "online-timeout",
            "Seconds to wait for the VM's runner to come online (boot, runner start); when it "
            "does not, the VM is terminated and the start fails, so the GPU job is skipped "
            "rather than queued for a day. 0: do not wait.",
            "600",
        ),
        _CLOUD_JOB_KEY,
        InputSpec(
            "budget-left",
            "gpu-gate's budget-left output (USD), or '$12.50', or '120 minutes': refuse "
            "before any cloud call when max-minutes at the dearest type's price is more. "
            "Empty: no budget check.",
            "",
        ),
        InputSpec(
            "instance-prices",
            "On-demand USD per hour by type (g5.xlarge=1.006, ...), for types or regions "
            "the packaged price table lacks; they win over the table.",
            "",
        ),
        InputSpec("runner-version", "The GitHub Actions runner release the VM runs.", "2.329.0"),
        InputSpec(
            "runner-sha256",
            "sha256 of that release's actions-runner-linux-x64 tarball (checked on the VM).",
            "194f1e1e4bd02f80b7e9633fc546084d8d4e19f3928a324d512ea53430102e1d",
        ),
    )
    + BOOTSTRAP_INPUTS,
    outputs=(
        OutputSpec(
            "label",
            "The runner's one label, with an unguessable nonce: the GPU job's runs-on "
            "(through needs).",
        ),
        OutputSpec("runner-id", "The just-in-time runner's id."),
        OutputSpec("instance-id", "The VM's id."),
        OutputSpec("instance-type", "The type that launched."),
        OutputSpec("availability-zone", "Where it launched."),
        OutputSpec("market", "spot or on-demand."),
        OutputSpec(
            "hourly-price", "USD per hour at most (on-demand's price; a spot VM pays less)."
        ),
        OutputSpec("expires-at", "When the VM ends at the latest (UTC, ISO 8601)."),
        OutputSpec("attempts", "JSON list of every candidate tried and its outcome."),
    ),
)

GPU_CLOUD_RUNNER_STOP = ActionSpec(
    name="gpu-cloud-runner/stop",
    summary="End a job's cloud GPU VM and runner, found by tags; report its minutes and cost.",
    module="gpu_ci.commands.gpu_cloud_runner_stop",
    groups=_CLOUD_GROUPS,
    runs_on="CPU runner (`if: always()`)",
    inputs=(
        _CLOUD_TOKEN,
        _CLOUD_REGION,
        _CLOUD_JOB_KEY,
        InputSpec(
            "wait-seconds",
            "How long to wait for a VM whose launch may still be in flight (the start "
            "job registered a runner but was cancelled).",
            "60",
        ),
        InputSpec(
            "report-file",
            "Write the VMs' minutes and cost as JSON here (default: "
            "$RUNNER_TEMP/gpu-cloud-runner-<job-key>.json).",
            "",
        ),
    )
    + BOOTSTRAP_INPUTS,
    outputs=(
        OutputSpec("instance-ids", "JSON list of the VMs found (each now terminated)."),
        OutputSpec("vm-minutes", "The VMs' minutes from launch to now."),
        OutputSpec("vm-cost", "Their cost in USD (at most: a spot VM is priced at on-demand)."),
        OutputSpec(
            "spot-interrupted",
            "'true' when AWS reclaimed a spot VM (its state reason), an infrastructure loss.",
        ),
        OutputSpec("report-file", "Path of the JSON report."),
    ),
)

GPU_CLOUD_RUNNER_REAP = ActionSpec(
    name="gpu-cloud-runner/reap",
    summary="Terminate leaked cloud GPU VMs and delete ghost runner registrations.",
    module="gpu_ci.commands.gpu_cloud_runner_reap",
    groups=_CLOUD_GROUPS,
    runs_on="CPU runner (`schedule`)",
    inputs=(
        _CLOUD_TOKEN,
        _CLOUD_REGION,
        InputSpec(
            "grace-minutes",
            "An offline registration younger than this is kept (a start may be between "
            "registering and launching); at least 15.",
            "15",
        ),
        InputSpec("dry-run", "Report what would be reaped; change nothing.", "false"),
        InputSpec("report-file", "Write what was reaped as JSON here.", ""),
    )
    + BOOTSTRAP_INPUTS,
    outputs=(
        OutputSpec("terminated", "JSON list of the VMs terminated (would be, in a dry run)."),
        OutputSpec("deleted", "JSON list of the runner ids deleted (would be, in a dry run)."),
        OutputSpec(
            "leaked-minutes", "VM minutes past the moment each leaked VM should have ended."
        ),
        OutputSpec("leaked-cost", "Their cost in USD, at each VM's price tag."),
    ),
)

ACTIONS: dict[str, ActionSpec] = {
    spec.name: spec
    for spec in (
        GPU_GATE,
        REMOVE_LABEL,
        SETUP_CONDA_FROM_LOCK,
        VERIFY_CUDA_ENV,
        GPU_STATUS,
        GPU_WATCHDOG,
        GPU_SPEND,
        GPU_MONITOR,
        GPU_LEASE,
        GPU_CLOUD_RUNNER,
        GPU_CLOUD_RUNNER_STOP,
        GPU_CLOUD_RUNNER_REAP,
    )
}


def groups_for(action: str) -> tuple[str, ...]:
    """The dependency groups an action installs.

    A name not (yet) known gets every group: e.g. the root action's ``command`` before
    the CLI validates it."""
    spec = ACTIONS.get(action)
    return spec.groups if spec else GROUPS
