"""PACT (Personal Agent Consent and Trust): a person's own agent calls ours for them.

The Identity profile (docs/pact.md): ``.a2a/pact.json`` lists the personal agents
(:mod:`.config`); each request carries a short-lived JWT a personal agent signs for one
of its users, checked by the gateway's one JWT verifier plus PACT's rules
(:mod:`.tokens`); the PACT URL answers messages with Messages (:mod:`.service`) and
serves its own card (:mod:`.mount`).

The Delegated profile: pact.json's ``delegation`` opens an OAuth 2.0 authorization
server below the PACT URL (:mod:`.oauth`: device authorization, the company's login
assertion, the consent page, delegation tokens signed with the workspace's key of
:mod:`.keys`); a request with ``X-A2A-User-Delegation`` runs as the user's account,
its scoped tools gated by the granted scopes, its replies with signed receipts.
"""

from .config import PACT_FILE, Delegation, PactConfig, PersonalAgent, Scope
from .mount import PACT_PROFILE_URI, PactMount, pact_path
from .oauth import DelegationServer
from .replay import ReplayGuard
from .service import PactService
from .tokens import DELEGATION_HEADER, PactAuthenticator

__all__ = [
    "DELEGATION_HEADER",
    "PACT_FILE",
    "PACT_PROFILE_URI",
    "Delegation",
    "DelegationServer",
    "PactAuthenticator",
    "PactConfig",
    "PactMount",
    "PactService",
    "PersonalAgent",
    "ReplayGuard",
    "Scope",
    "pact_path",
]
