"""The gpu-ci command line: subcommands, flags, inputs from the environment, exit codes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpu_ci import __version__
from gpu_ci.cli import build_parser
from gpu_ci.errors import UsageError
from gpu_ci.inputs import Inputs
from gpu_ci.specs import ACTIONS, GPU_GATE, SETUP_CONDA_FROM_LOCK


def run_code(code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter with only this checkout's ``src`` on the path."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": "src"},
    )


def test_help_lists_the_four_subcommands(run_cli):
    result = run_cli(["--help"])
    assert result.returncode == 0
    for name in ("gpu-gate", "remove-label", "setup-conda-from-lock", "verify-cuda-env"):
        assert name in result.stdout


@pytest.mark.parametrize("name", sorted(ACTIONS))
def test_subcommand_help_lists_every_input_with_its_default(run_cli, name):
    result = run_cli([name, "--help"])
    assert result.returncode == 0
    text = "".join(result.stdout.split())  # argparse wraps lines anywhere
    for item in ACTIONS[name].inputs:
        assert f"--{item.name}" in text
        assert item.env_name in text
        if item.default:
            assert f"default:{''.join(item.default.split())}" in text


def test_version(run_cli):
    result = run_cli(["--version"])
    assert result.returncode == 0
    assert result.stdout.strip() == f"gpu-ci {__version__}"


def test_unknown_flag_is_unusable_arguments(run_cli):
    result = run_cli(["gpu-gate", "--no-such-input", "x"])
    assert result.returncode == 2
    assert "unrecognized arguments: --no-such-input" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_flag_wins_over_environment_which_wins_over_default():
    env = {"INPUT_LABEL": "from-env", "INPUT_MIN_PERMISSION": "admin"}
    inputs = Inputs(GPU_GATE, {"label": "from-flag"}, env)
    assert inputs["label"] == "from-flag"
    assert inputs["min-permission"] == "admin"
    assert inputs["run-on"] == GPU_GATE.input("run-on").default


def test_empty_environment_value_means_default():
    inputs = Inputs(GPU_GATE, {}, {"INPUT_LABEL": "  "})
    assert inputs["label"] == "CUDA CI"


def test_dash_becomes_underscore_in_environment_name():
    inputs = Inputs(GPU_GATE, {}, {"INPUT_REQUIRE_FRESH_HEAD": "false"})
    assert inputs.boolean("require-fresh-head") is False


def test_boolean_input_refuses_anything_but_yaml_booleans():
    inputs = Inputs(GPU_GATE, {"skip-draft": "yes"}, {})
    with pytest.raises(UsageError, match="'skip-draft' of gpu-gate must be true or false"):
        inputs.boolean("skip-draft")


def test_missing_required_input_is_a_usage_error_naming_it():
    with pytest.raises(UsageError, match="input 'lock-file' is required"):
        Inputs(SETUP_CONDA_FROM_LOCK, {}, {})


def test_items_split_on_commas_and_newlines():
    inputs = Inputs(GPU_GATE, {"label": "a, b\nc\n\n"}, {})
    assert inputs.items("label") == ["a", "b", "c"]


def test_parser_has_one_flag_per_input():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, spec in ACTIONS.items():
        flags = {o for a in sub.choices[name]._actions for o in a.option_strings}
        assert {f"--{i.name}" for i in spec.inputs} <= flags


def test_internal_error_is_one_annotation_without_traceback(tmp_path):
    # A command module that raises an unexpected exception is reported, not dumped.
    code = (
        "import gpu_ci.cli as c, types, sys\n"
        "m = types.ModuleType('boom'); m.run = lambda i, r: 1 / 0\n"
        "sys.modules['boom'] = m\n"
        "c.ACTIONS['gpu-gate'] = c.ACTIONS['gpu-gate']._replace(module='boom')\n"
        "raise SystemExit(c.main(['gpu-gate']))\n"
    )
    proc = run_code(code)
    assert proc.returncode == 1
    assert "::error title=gpu-ci gpu-gate internal error::" in proc.stdout
    assert "ZeroDivisionError" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["setup-conda-from-lock", "--lock-file", "x"], "setup-conda-from-lock"),
        (["--", "gpu-gate"], "gpu-gate"),
        (["spend", "--help"], "gpu-spend"),
        (["--version"], None),
        ([], None),
        (["-h", "gpu-gate"], None),
        (["--x", "gpu-gate"], None),
        (["no-such-action"], "no-such-action"),
    ],
)
def test_main_builds_only_the_flags_of_the_subcommand_argparse_picks(argv, command):
    from gpu_ci.cli import _command_in

    assert _command_in(argv) == command


@pytest.mark.parametrize("name", sorted(ACTIONS))
def test_parser_for_one_subcommand_has_all_its_flags(name):
    def flags(parser, action):
        sub = next(a for a in parser._actions if a.dest == "command")
        return {o for a in sub.choices[action]._actions for o in a.option_strings}

    assert flags(build_parser(name), name) == flags(build_parser(), name)
    assert {i.name for i in ACTIONS[name].inputs} <= {f[2:] for f in flags(build_parser(), name)}


def test_unknown_subcommand_lists_every_action(run_cli):
    result = run_cli(["no-such-action"])
    assert result.returncode == 2
    for name in ACTIONS:
        assert name in result.stdout + result.stderr


def test_alias_runs_with_its_actions_flags(run_cli):
    result = run_cli(["spend", "--help"])
    assert result.returncode == 0 and "--" + ACTIONS["gpu-spend"].inputs[0].name in result.stdout


def test_python_m_gpu_ci_runs_the_command_with_the_cyclic_collector_on(tmp_path):
    """``__main__`` pauses the collector while the CLI is imported: not while a command runs
    (a long-running command, e.g. gpu-monitor, must not accumulate cycles)."""
    code = (
        "import gc, runpy, sys, gpu_ci.cli as c\n"
        "c.main = lambda: print('collector on' if gc.isenabled() else 'off') or 0\n"
        "sys.modules['gpu_ci.cli'] = c\n"
        "runpy.run_module('gpu_ci', run_name='__main__')\n"
    )
    proc = run_code(code)
    assert proc.stdout.strip() == "collector on", proc.stdout + proc.stderr


@pytest.mark.parametrize("name", sorted(ACTIONS) + ["spend"])
def test_an_action_named_alone_gets_argparses_flags_without_argparse(name):
    """How every composite action runs us (inputs as INPUT_<NAME>): the flags main passes
    on are those argparse would give, every one unset, and argparse is never imported."""
    code = (
        "import sys, gpu_ci.cli as c\n"
        "c.run_command = lambda n, f, rt: print(n, sorted(f.items())) or 0\n"
        f"c.main([{name!r}])\n"
        "print('argparse' in sys.modules)\n"
    )
    proc = run_code(code)
    action = {"spend": "gpu-spend"}.get(name, name)
    args = vars(build_parser(action).parse_args([name]))
    args.pop("command")
    assert proc.stdout.splitlines() == [f"{action} {sorted(args.items())}", "False"], proc.stderr
    assert args and set(args.values()) == {None}
