"""Resolving action inputs: a ``--flag`` wins over ``INPUT_<NAME>``, which wins over the default;
``none`` turns off an input whose spec says it may be (:data:`OFF`).

Typed accessors turn the strings GitHub passes into values and refuse anything else with a
:class:`UsageError` that names the input, so a typo in a workflow fails at once instead of
silently meaning ``false``.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpu_ci.errors import UsageError
from gpu_ci.specs import ActionSpec

#: The word that turns off an input marked ``off`` in its spec: through the action an empty
#: ``with:`` value falls back to the default, so an input whose default is on needs a word.
OFF = "none"

_TRUE = {"true", "True", "TRUE"}
_FALSE = {"false", "False", "FALSE"}


class Inputs:
    """The resolved string inputs of one action run."""

    def __init__(
        self, spec: ActionSpec, flags: Mapping[str, str | None], environ: Mapping[str, str]
    ) -> None:
        self.spec = spec
        self._values: dict[str, str] = {}
        for item in spec.inputs:
            flag = flags.get(item.name)
            if flag is not None:
                value = flag
            else:
                value = environ.get(item.env_name, "").strip()
                if not value:
                    value = item.default
            if item.off and value.strip().lower() == OFF:
                value = ""
            self._values[item.name] = value
            if item.required and not value:
                raise UsageError(
                    f"input '{item.name}' is required for {spec.name}: set it with "
                    f"'with: {item.name}: ...' in the workflow, or --{item.name} on the CLI."
                )

    def __getitem__(self, name: str) -> str:
        return self._values[name]

    def boolean(self, name: str) -> bool:
        value = self._values[name]
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
        raise UsageError(
            f"input '{name}' of {self.spec.name} must be true or false, got {value!r}."
        )

    def choice(self, name: str, allowed: tuple[str, ...]) -> str:
        value = self._values[name].strip().lower()
        if value not in allowed:
            raise UsageError(
                f"input '{name}' of {self.spec.name} must be one of {', '.join(allowed)}; "
                f"got {self._values[name]!r}."
            )
        return value

    def items(self, name: str) -> list[str]:
        """A newline- or comma-separated list, blanks dropped."""
        raw = self._values[name].replace(",", "\n")
        return [part.strip() for part in raw.splitlines() if part.strip()]

    def lines(self, name: str) -> list[str]:
        """A newline-separated list (commas kept), blanks and ``#`` comments dropped."""
        out = []
        for line in self._values[name].splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                out.append(line)
        return out
