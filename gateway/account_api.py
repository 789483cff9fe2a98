"""An example scoped tool: one call to a company's account API with the user's
delegation token (PACT Delegated, docs/pact.md).

A host registers it like any tool, under a name a pact.json scope lists::

    tools = [AccountApiTool("list_orders", "List the user's orders.",
                            "https://api.acme.example/orders")]
    Gateway(settings, tools=tools)

During a delegated turn the assistant hands it the user's token (``context.bearer``,
granted the scope that lists the tool); it sends ``Authorization: Bearer <token>``
through the guarded outbound client (https; private addresses only as that client
allows) and gives the model the API's answer (status and body, capped). The API checks
the token against the gateway's ``<PACT URL>/oauth/jwks.json``: ``typ`` ``at+jwt``,
``iss``, ``aud``, ``sub`` and ``scope``. Without a token (a turn that is not delegated)
the tool refuses, and the token never appears in what it returns or logs.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from typing import Any

from a2a_gateway.agent.tools.base import Tool, ToolContext, ToolError, ToolResult
from a2a_gateway.server.outbound import OutboundClient, OutboundError

MAX_ANSWER_BYTES = 64 * 1024
NO_TOKEN = "This tool acts on the user's account: it needs the user's permission (PACT)."


class AccountApiTool(Tool):
    """GET (the arguments as the query) or POST (the arguments as a JSON body) one URL."""

    def __init__(
        self,
        name: str,
        description: str,
        url: str,
        *,
        outbound: OutboundClient | None = None,
        allow_private: bool = False,
        method: str = "GET",
        parameters: Mapping[str, Any] | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        if method not in ("GET", "POST"):
            raise ValueError("method must be GET or POST")
        self.name = name
        self.description = description
        self.url = url
        self.method = method
        self.parameters = parameters or {"type": "object", "properties": {}}
        #: The guarded client (its own unless given; ``allow_private``: the API may be on
        #: a private address or plain http, e.g. on this machine).
        self.outbound = outbound or OutboundClient(allow_private_urls=allow_private)
        self.timeout_s = timeout_s

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        if not context.bearer:
            raise ToolError(NO_TOKEN)
        headers = {"Authorization": f"Bearer {context.bearer}", "Accept": "application/json"}
        url, data = self.url, None
        if self.method == "GET" and arguments:
            query = urllib.parse.urlencode({k: str(v) for k, v in arguments.items()})
            url += ("&" if "?" in url else "?") + query
        elif self.method == "POST":
            data = json.dumps(dict(arguments)).encode()
            headers["Content-Type"] = "application/json"
        try:
            answer = await self.outbound.request(
                self.method,
                url,
                headers=headers,
                data=data,
                timeout_s=self.timeout_s,
                max_response_bytes=MAX_ANSWER_BYTES,
                truncate=True,
            )
        except OutboundError as exc:  # names the host and the reason only
            raise ToolError(f"The account API could not be reached: {exc}") from None
        body = answer.body.decode("utf-8", "replace")
        if answer.status >= 400:
            return ToolResult(f"The account API answered {answer.status}: {body}", is_error=True)
        return ToolResult(body)


__all__ = ["NO_TOKEN", "AccountApiTool"]
