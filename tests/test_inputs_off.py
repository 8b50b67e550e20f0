"""``none`` turns an input off (issue 25 item 5): through an action an empty ``with:`` value
falls back to the default, so an input whose default is on needs a word for "off". One rule
(``gpu_ci.inputs.OFF``) for every input whose spec is ``off``, and every input documented as
one that can be turned off is such an input."""

from __future__ import annotations

import re

import pytest

from gpu_ci.inputs import OFF, Inputs
from gpu_ci.specs import ACTIONS

OFF_INPUTS = [(a.name, i.name) for a in ACTIONS.values() for i in a.inputs if i.off]


def test_the_inputs_that_can_be_turned_off():
    assert sorted(OFF_INPUTS) == [
        ("gpu-gate", "budget-ledger"),
        ("gpu-gate", "label"),
        ("gpu-spend", "cloud-artifacts"),
        ("gpu-spend", "monitor-artifacts"),
        ("gpu-spend", "reuse-ledger"),
        ("gpu-watchdog", "context"),
        ("gpu-watchdog", "monitor-artifacts"),
    ]


@pytest.mark.parametrize(("action", "name"), OFF_INPUTS)
@pytest.mark.parametrize("word", ["none", "None", " NONE "])
def test_none_turns_the_input_off_and_its_description_says_so(action, name, word):
    spec = ACTIONS[action]
    item = spec.input(name)
    assert item.default, "an input whose default is off needs no word"
    assert f"{OFF}: " in item.description
    assert Inputs(spec, {}, {item.env_name: word})[name] == ""
    assert Inputs(spec, {name: word}, {})[name] == ""  # the CLI's flag too
    assert Inputs(spec, {}, {item.env_name: ""})[name] == item.default


def test_every_input_documented_as_off_when_empty_has_the_word():
    """An input with a default whose description says what empty means could not be set
    empty through the action: it must take ``none`` instead."""
    for spec in ACTIONS.values():
        for item in spec.inputs:
            if item.default and re.search(r"\bempty: ", item.description, re.IGNORECASE):
                assert item.off, (spec.name, item.name)


def test_none_is_a_value_for_other_inputs():
    spec = ACTIONS["gpu-gate"]
    runs_on = spec.input("cpu-runs-on")
    assert Inputs(spec, {}, {runs_on.env_name: "none"})["cpu-runs-on"] == "none"
