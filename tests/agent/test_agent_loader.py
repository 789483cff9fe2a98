"""``serve --agent module:attr``."""

from __future__ import annotations

import pytest

from a2a_gateway.agent.faux import FauxAgent
from a2a_gateway.agent.loader import AgentLoadError, load_agent

SHARED = FauxAgent()


def factory() -> FauxAgent:
    return FauxAgent()


def not_an_agent() -> str:
    return "nope"


def test_loads_a_class_an_instance_and_a_factory() -> None:
    assert isinstance(load_agent("a2a_gateway.agent.faux:FauxAgent"), FauxAgent)
    assert load_agent(f"{__name__}:SHARED") is SHARED
    assert isinstance(load_agent(f"{__name__}:factory"), FauxAgent)


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("no-colon", "module:attr"),
        (":Attr", "module:attr"),
        ("a2a_gateway.agent.faux:", "module:attr"),
        ("no_such_module_xyz:Agent", "cannot import"),
        ("a2a_gateway.agent.faux:Missing", "no attribute"),
        (f"{__name__}:not_an_agent", "not an Agent"),
        ("a2a_gateway.agent.faux:HOLD_CAP_S", "not an Agent"),
        ("a2a_gateway.agent.process:ProcessAgent", "without arguments"),
    ],
)
def test_bad_specs_say_why(spec: str, reason: str) -> None:
    with pytest.raises(AgentLoadError, match=reason):
        load_agent(spec)
