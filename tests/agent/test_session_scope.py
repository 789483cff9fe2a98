"""Session scopes keep every (caller, context) pair apart."""

from __future__ import annotations

import itertools

from a2a_gateway.agent.base import session_scope
from a2a_gateway.protocol.context import Caller


def test_scope_format() -> None:
    scope = session_scope("telegram-42", Caller("travel-bot", "/ws"), "ctx_1")
    assert scope == "telegram-42-a2a-travel-bot_ctx_1"


def test_distinct_callers_and_contexts_never_share_a_scope() -> None:
    # Hyphens and underscores are where a naive join could collide.
    callers = ["a", "a-b", "b", "a-b-c"]
    contexts = ["x", "b_x", "c_x", "x_y", "-x"]
    scopes = {
        session_scope("p", Caller(name), context)
        for name, context in itertools.product(callers, contexts)
    }
    assert len(scopes) == len(callers) * len(contexts)
