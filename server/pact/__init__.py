"""PACT (Personal Agent Consent and Trust): a person's own agent calls ours for them.

The Identity profile (docs/pact.md): ``.a2a/pact.json`` lists the personal agents
(:mod:`.config`); each request carries a short-lived JWT a personal agent signs for one
of its users, checked by the gateway's one JWT verifier plus PACT's rules
(:mod:`.tokens`); the PACT URL answers messages with Messages (:mod:`.service`) and
serves its own card (:mod:`.mount`).
"""

from .config import PACT_FILE, PactConfig, PersonalAgent
from .mount import PACT_PROFILE_URI, PactMount, pact_path
from .service import PactService
from .tokens import PactAuthenticator, ReplayGuard

__all__ = [
    "PACT_FILE",
    "PACT_PROFILE_URI",
    "PactAuthenticator",
    "PactConfig",
    "PactMount",
    "PactService",
    "PersonalAgent",
    "ReplayGuard",
    "pact_path",
]
