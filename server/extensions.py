"""The card's extensions as the local service enforces them (digest §9, §12).

A call activates the extensions it names in ``A2A-Extensions`` (HTTP header, gRPC
metadata ``a2a-extensions``; the bindings parse it into ``CallContext.extensions``)
that our card declares; the rest are ignored. A card extension declared
``required: true`` that a call does not name refuses the call with
ExtensionSupportRequiredError (-32008; HTTP 400, gRPC FAILED_PRECONDITION,
``EXTENSION_SUPPORT_REQUIRED``), before anything else looks at it. The activated set
goes into ``CallContext.activated_extensions``, which every binding echoes (the
``A2A-Extensions`` response header, gRPC initial metadata).

The task engine applies the policy, so every binding behaves the same; in proxy mode the
upstream agent, which declared the extensions, decides. The cards themselves (the
public card and GetExtendedAgentCard) are not refused: a client learns there which
extensions it must name.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.errors import ExtensionSupportRequiredError
from lf.a2a.v1 import a2a_pb2 as pb


@dataclass(frozen=True, slots=True)
class ExtensionPolicy:
    """The URIs our card declares, and those of them it requires."""

    supported: frozenset[str]
    required: tuple[str, ...]

    @classmethod
    def from_card(cls, extensions: Iterable[pb.AgentExtension]) -> ExtensionPolicy | None:
        """The policy of a card's ``capabilities.extensions`` (None: it declares none, so
        a call costs nothing)."""
        declared = list(extensions)
        if not declared:
            return None
        required = tuple(dict.fromkeys(e.uri for e in declared if e.required))
        return cls(frozenset(e.uri for e in declared), required)

    def activate(self, context: CallContext) -> None:
        """Refuse a call that does not name every required extension; else record the
        declared ones it names as activated."""
        requested = context.extensions
        missing = [uri for uri in self.required if uri not in requested]
        if missing:
            shown = ", ".join(missing)
            raise ExtensionSupportRequiredError(
                f"This agent requires the extension {shown}: name it in the"
                " A2A-Extensions header (gRPC metadata a2a-extensions)",
                metadata={"extensions": shown},
            )
        if requested:
            context.activated_extensions.update(self.supported & requested)

    def stream_refusal(self, context: CallContext) -> AsyncIterator[pb.StreamResponse] | None:
        """:meth:`activate` for a streaming operation: None when the call may go on, else
        a stream that raises the refusal with its first event (a service raises errors
        found before a stream starts there, so bindings still answer a plain error)."""
        try:
            self.activate(context)
        except ExtensionSupportRequiredError as exc:
            return _refused(exc)
        return None


async def _refused(error: ExtensionSupportRequiredError) -> AsyncIterator[pb.StreamResponse]:
    raise error
    yield  # an async generator: the error comes with the first event


__all__ = ["ExtensionPolicy"]
