"""The ``gpu-ci`` command line: one subcommand per action, one flag per action input.

Command modules are imported only when their subcommand runs, so that ``gpu-ci
verify-cuda-env`` on a GPU runner never loads PyGithub, and ``gpu-ci gpu-gate`` never loads
NVML or conda code.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpu_ci import __version__
from gpu_ci.errors import GpuCiError, UsageError
from gpu_ci.inputs import Inputs
from gpu_ci.runtime import Runtime
from gpu_ci.specs import ACTIONS, ActionSpec

if TYPE_CHECKING:
    import argparse


def _parser_class() -> type[argparse.ArgumentParser]:
    """argparse that reports unusable arguments as an annotation, exit 2.

    Defined on first use: a composite action passes no arguments and never needs argparse."""
    import argparse

    from actions_toolkit.command import issue_command

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str) -> None:  # type: ignore[override]
            self.print_usage(sys.stderr)
            # the message quotes the arguments: escaped, so none becomes a workflow command
            issue_command("error", {"title": "unusable arguments"}, f"{self.prog}: {message}")
            sys.exit(2)

    return _Parser


def _flag_help(spec: ActionSpec, name: str) -> str:
    item = spec.input(name)
    default = item.default if item.default else "(empty)"
    if item.required:
        default = "required"
    return f"{item.description} [env {item.env_name}; default: {default}]"


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or of the action named ``only``.

    ``main`` builds the one being run: the 8 subparsers and ~100 flags of every action cost
    each run several ms. Any other ``only`` builds them all, for argparse's errors."""
    parser_class = _parser_class()
    parser = parser_class(
        prog="gpu-ci",
        description="Reusable GitHub Actions for GPU CI, as a command line. Each subcommand "
        "is one action; each flag one of its inputs (also read from INPUT_<NAME>).",
    )
    parser.add_argument("--version", action="version", version=f"gpu-ci {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="<action>", parser_class=parser_class)
    for name, spec in ACTIONS.items():
        if only in ACTIONS and name != only:
            continue
        cmd = sub.add_parser(
            name,
            help=spec.summary,
            description=spec.summary,
            aliases=[a for a, n in ALIASES.items() if n == name],
        )
        for item in spec.inputs:
            cmd.add_argument(
                f"--{item.name}",
                dest=item.name,
                metavar="VALUE",
                default=None,
                help=_flag_help(spec, item.name),
            )
    return parser


#: shorter subcommand names: alias -> action
ALIASES = {"spend": "gpu-spend"}

#: third-party module -> the extra of gpu-ci-actions that provides it
EXTRAS = {
    "rattler": "conda",
    "yaml": "conda",
    "prometheus_client": "monitor",
    "boto3": "cloud",
    "botocore": "cloud",
}


def run_command(name: str, flags: dict[str, str | None], rt: Runtime) -> int:
    spec = ACTIONS[name]
    inputs = Inputs(spec, flags, rt.environ)
    try:
        module = importlib.import_module(spec.command_module)
        return int(module.run(inputs, rt))
    except ModuleNotFoundError as exc:
        extra = EXTRAS.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        raise UsageError(
            f"gpu-ci {name} needs the '{extra}' extra ({exc.name} is missing): "
            f"pip install 'gpu-ci-actions[{extra}]'."
        ) from None


def _command_in(argv: Sequence[str]) -> str | None:
    """The subcommand argparse will run: the first argument, aliases resolved. None when
    there is none or an option comes first (``--help``, ``--version`` or a wrong one: what
    argparse prints then comes from the parser of every action)."""
    for arg in argv:
        if not arg.startswith("-"):
            return ALIASES.get(arg, arg)
        if arg != "--":
            return None
    return None


def _no_flags(argv: Sequence[str]) -> str | None:
    """The action when ``argv`` is its name (or alias) alone; else None.

    Every composite action runs us so, its inputs in INPUT_<NAME>. argparse would set every
    flag to None, and it and the parser cost each action's start-up ~5 ms. Anything else is
    argparse's."""
    if len(argv) == 1:
        name = ALIASES.get(argv[0], argv[0])
        if name in ACTIONS:
            return name
    return None


def main(argv: Sequence[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    command = _no_flags(arguments)
    if command is not None:
        flags: dict[str, str | None] = {item.name: None for item in ACTIONS[command].inputs}
    else:
        parser = build_parser(_command_in(arguments))
        args = parser.parse_args(argv)
        if not args.command:
            parser.print_help()
            return 2
        flags = {k: v for k, v in vars(args).items() if k != "command"}
        command = ALIASES.get(args.command, args.command)
    rt = Runtime()
    try:
        return run_command(command, flags, rt)
    except GpuCiError as exc:
        rt.error(exc.message, title=exc.title or f"gpu-ci {command}")
        return exc.exit_code
    except KeyboardInterrupt:
        rt.error("interrupted", title=f"gpu-ci {command}")
        return 130
    except Exception as exc:  # a bug: say so plainly, traceback only when debugging
        if os.environ.get("RUNNER_DEBUG") == "1" or os.environ.get("GPU_CI_DEBUG") == "1":
            import traceback  # only here: it costs every run a few ms of start-up

            traceback.print_exc()
        rt.error(
            f"internal error in gpu-ci {__version__} ({type(exc).__name__}: {exc}). Please "
            "report it with this log; set RUNNER_DEBUG=1 for a traceback.",
            title=f"gpu-ci {command} internal error",
        )
        return 1
    finally:
        try:
            rt.flush_summary()
        except OSError as exc:
            sys.stderr.write(f"gpu-ci: could not write the job summary: {exc}\n")


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())


__all__ = ["main", "build_parser", "run_command", "UsageError"]
