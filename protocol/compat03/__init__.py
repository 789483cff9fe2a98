"""The A2A 0.3 bridge: pure translation between 0.3 JSON-RPC payloads and 1.0 messages.

No I/O. The JSON-RPC binding looks a 0.3 method name up in :data:`METHODS`, turns its
``params`` into the 1.0 request with :attr:`Method.parse`, calls the same service
operation as the 1.0 method, and turns the 1.0 result into the 0.3 JSON with
:attr:`Method.result` (streams: :func:`stream_event`; errors: :func:`error_object`).
Ground truth is the official SDK's ``a2a/compat/v0_3/conversions.py`` (digest §14).

Decisions where 0.3 and 1.0 do not line up:

- ``configuration.blocking`` absent means blocking on JSON-RPC (0.3 JSON-RPC clients
  expect it); on HTTP+JSON and gRPC it is a proto3 bool, so absent (with or without a
  ``configuration``) is non-blocking; ``returnImmediately = !blocking``. Our client
  always sends it.
- ``historyLength: 0`` meant "unlimited" in 0.3 and is left unset, as the SDK does.
- A non-object ``Part.data`` travels as ``{"value": X}`` with
  ``metadata.data_part_compat = true`` (both ways).
- Push auth ``schemes[]`` keeps only ``schemes[0]`` (1.0 has one scheme).
- A 0.3 push config without an ``id`` gets the task id, and a get/delete without
  ``pushNotificationConfigId`` means that config: 0.3 servers (the SDK's store too)
  defaulted the config id to the task id.
- 1.0-only errors (-32008, -32009) become -32603, as the SDK's 0.3 adapter does.
- ``status-update`` carries ``final: true`` in every terminal or interrupted state
  (input-required, auth-required): a 0.3 stream ends there, and 0.3 clients stop at the
  first final event.

Bad 0.3 input raises :class:`InvalidParamsError` naming the field by its 0.3 path.

Modules: :mod:`.version` (the 0.3 version rule), :mod:`.tables` (role/state tables),
:mod:`.params_in` (0.3 params -> 1.0 requests), :mod:`.objects_out` (1.0 -> 0.3 messages,
tasks, stream events, push configs), :mod:`.methods` (the 0.3 JSON-RPC method table),
:mod:`.card` (0.3 and hybrid cards), :mod:`.errors` (0.3 error objects both ways),
:mod:`.rest_server` (server side of 0.3 HTTP+JSON), :mod:`.calls` and :mod:`.results_in`
(client side over 0.3 JSON-RPC), :mod:`.rest_client` (client side over 0.3 HTTP+JSON).
"""

from __future__ import annotations

from .calls import (
    CALLS,
    Call,
    cancel_task_params,
    delete_push_config_params,
    get_push_config_params,
    get_task_params,
    legacy_call,
    list_push_configs_params,
    send_params,
    set_push_config_params,
    subscribe_params,
)
from .card import agent_card, hybrid_card
from .errors import V03_ERROR_CODES, V03_FALLBACK_CODE, error_code, error_in, error_object
from .methods import METHODS, Method
from .objects_out import (
    artifact_out,
    artifact_update_out,
    message_out,
    part_out,
    push_config_out,
    status_out,
    status_update_out,
    stream_event,
    task_out,
)
from .params_in import (
    cancel_task_request,
    delete_push_config_request,
    extended_card_request,
    get_push_config_request,
    get_task_request,
    list_push_configs_request,
    list_tasks_request,
    message_in,
    part_in,
    send_message_request,
    set_push_config_request,
    subscribe_request,
)
from .rest_client import RestCall, rest_call, rest_result_in, rest_stream_response_in
from .rest_server import (
    REST_PREFIX,
    REST_ROUTES,
    RestMatch,
    RestRoute,
    rest_error_body,
    rest_match,
    rest_object,
    rest_result,
    rest_send_params,
    rest_set_push_params,
    rest_stream_event,
)
from .results_in import (
    empty_result_in,
    message_json_in,
    part_json_in,
    push_config_result_in,
    push_list_result_in,
    send_result_in,
    stream_response_in,
    task_json_in,
    task_result_in,
)
from .tables import DATA_PART_COMPAT, JSON, ROLES, TASK_STATES
from .version import (
    LEGACY_CARD_VERSION,
    LEGACY_VERSION,
    is_legacy_version,
    negotiate_legacy_version,
)

__all__ = [
    "CALLS",
    "DATA_PART_COMPAT",
    "JSON",
    "LEGACY_CARD_VERSION",
    "LEGACY_VERSION",
    "METHODS",
    "REST_PREFIX",
    "REST_ROUTES",
    "ROLES",
    "TASK_STATES",
    "V03_ERROR_CODES",
    "V03_FALLBACK_CODE",
    "Call",
    "Method",
    "RestCall",
    "RestMatch",
    "RestRoute",
    "agent_card",
    "artifact_out",
    "artifact_update_out",
    "cancel_task_params",
    "cancel_task_request",
    "delete_push_config_params",
    "delete_push_config_request",
    "empty_result_in",
    "error_code",
    "error_in",
    "error_object",
    "extended_card_request",
    "get_push_config_params",
    "get_push_config_request",
    "get_task_params",
    "get_task_request",
    "hybrid_card",
    "is_legacy_version",
    "legacy_call",
    "list_push_configs_params",
    "list_push_configs_request",
    "list_tasks_request",
    "message_in",
    "message_json_in",
    "message_out",
    "negotiate_legacy_version",
    "part_in",
    "part_json_in",
    "part_out",
    "push_config_out",
    "push_config_result_in",
    "push_list_result_in",
    "rest_call",
    "rest_error_body",
    "rest_match",
    "rest_object",
    "rest_result",
    "rest_result_in",
    "rest_send_params",
    "rest_set_push_params",
    "rest_stream_event",
    "rest_stream_response_in",
    "send_message_request",
    "send_params",
    "send_result_in",
    "set_push_config_params",
    "set_push_config_request",
    "status_out",
    "status_update_out",
    "stream_event",
    "stream_response_in",
    "subscribe_params",
    "subscribe_request",
    "task_json_in",
    "task_out",
    "task_result_in",
]
