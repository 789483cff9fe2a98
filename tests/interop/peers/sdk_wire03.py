"""The official SDK's A2A 0.3 conversions, as a JSON-in/JSON-out oracle (runs in .venv-peer).

Reads one JSON object on stdin::

    {"task": <1.0 Task ProtoJSON>, "card": <1.0 AgentCard ProtoJSON>,
     "rest_task": <a 0.3 REST Task body written by the gateway>}

and writes one JSON object on stdout, each member what the SDK does with the input:

- ``jsonrpc_task``: ``task`` as the SDK's 0.3 JSON-RPC server answers it;
- ``rest_task``: ``task`` as the SDK's 0.3 REST server answers it (0.3 ProtoJSON);
- ``rest_task_read``: the gateway's ``rest_task`` as the SDK's 0.3 REST client reads it
  (1.0 ProtoJSON), or ``{"error": …}``;
- ``rest_send_body``: the body the SDK's 0.3 REST client POSTs to ``/v1/message:send`` for
  the first history message of ``task``;
- ``grpc_send``: the same request as the SDK's 0.3 gRPC client sends it (base64 of the
  serialized ``a2a.v1.SendMessageRequest``);
- ``hybrid_card``: ``card`` as the SDK's server publishes it (1.0 + 0.3 keys).
"""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

from a2a.compat.v0_3 import a2a_v0_3_pb2 as pb03
from a2a.compat.v0_3 import conversions, proto_utils
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types import a2a_pb2 as pb
from google.protobuf.json_format import MessageToDict, Parse, ParseDict


def main() -> None:
    given: dict[str, Any] = json.load(sys.stdin)
    task = ParseDict(given["task"], pb.Task())
    compat_task = conversions.to_compat_task(task)
    out: dict[str, Any] = {
        "jsonrpc_task": compat_task.model_dump(mode="json", by_alias=True, exclude_none=True),
        "rest_task": MessageToDict(proto_utils.ToProto.task(compat_task)),
    }
    try:
        read = Parse(json.dumps(given["rest_task"]), pb03.Task(), ignore_unknown_fields=True)
        out["rest_task_read"] = MessageToDict(
            conversions.to_core_task(proto_utils.FromProto.task(read))
        )
    except Exception as exc:  # what the SDK client would raise
        out["rest_task_read"] = {"error": repr(exc)[:300]}
    message = conversions.to_compat_message(task.history[0])
    request = pb03.SendMessageRequest(request=proto_utils.ToProto.message(message))
    out["rest_send_body"] = MessageToDict(request)
    out["grpc_send"] = base64.b64encode(request.SerializeToString()).decode()
    out["hybrid_card"] = agent_card_to_dict(ParseDict(given["card"], pb.AgentCard()))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
