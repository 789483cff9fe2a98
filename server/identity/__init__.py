"""Who is calling, beyond static keys: one module per scheme (see DESIGN.md "Identity").

- :mod:`.jwt` — JWT bearer tokens of an OpenID Connect issuer (discovery, JWKS cache,
  verification); the one JWT verifier of the gateway.
- :mod:`.basic` — HTTP Basic with scrypt password hashes.
- :mod:`.rules` — the ``jwt`` and ``basic`` identities of a callers.json entry.

``server/auth.py`` reads callers.json and asks these modules; the bindings only ever see
:class:`a2a_gateway.server.auth.Authenticator`.
"""

from .basic import BasicRefused, PasswordChecker, hash_password, verify_password
from .jwt import ALLOWED_ALGORITHMS, JwtVerifier, TokenRefused
from .rules import BasicRule, JwtRule

__all__ = [
    "ALLOWED_ALGORITHMS",
    "BasicRefused",
    "BasicRule",
    "JwtRule",
    "JwtVerifier",
    "PasswordChecker",
    "TokenRefused",
    "hash_password",
    "verify_password",
]
