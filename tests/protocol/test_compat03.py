"""The A2A 0.3 bridge (protocol/compat03): every row of digest §14.2, round trips,
the agent card of §14.3, the error mapping, and bad 0.3 input naming its field."""

from __future__ import annotations

import re
from typing import Any

import pytest
from google.protobuf import empty_pb2, json_format

from a2a_gateway.protocol import codec, compat03, errors
from lf.a2a.v1 import a2a_pb2 as pb


def user(*parts: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"kind": "message", "messageId": "m-1", "role": "user", "parts": list(parts), **extra}


def send(message: dict[str, Any], **params: Any) -> pb.SendMessageRequest:
    return compat03.send_message_request({"message": message, **params})


TEXT = {"kind": "text", "text": "hello"}


# --- §14.2 rows, inbound and outbound ---------------------------------------------------


def test_discriminator_kind_is_accepted_inbound_and_added_outbound() -> None:
    request = send(user(TEXT))
    assert request.message.parts[0].text == "hello"
    # a peer that omits kind is tolerated (the part member says what it is)
    assert send(user({"text": "x"})).message.parts[0].text == "x"
    out = compat03.message_out(codec.to_dict(request.message))
    assert out["kind"] == "message" and out["parts"] == [{"kind": "text", "text": "hello"}]


@pytest.mark.parametrize(("name", "value"), compat03.ROLES)
def test_roles_map_both_ways(name: str, value: int) -> None:
    message = send(user(TEXT) | {"role": name}).message
    assert message.role == value
    assert compat03.message_out(codec.to_dict(message))["role"] == name


@pytest.mark.parametrize(("name", "value"), compat03.TASK_STATES)
def test_task_states_map_to_0_3_names(name: str, value: int) -> None:
    task = pb.Task(id="t", context_id="c", status=pb.TaskStatus(state=value))  # type: ignore[arg-type]
    assert compat03.task_out(codec.to_dict(task))["status"]["state"] == name


def test_send_message_result_is_a_bare_task_or_message() -> None:
    method = compat03.METHODS["message/send"]
    assert method.result is not None
    task = pb.Task(id="t-1", context_id="c-1", status=pb.TaskStatus(state=pb.TASK_STATE_WORKING))
    result = method.result(pb.SendMessageResponse(task=task))
    assert result == {
        "kind": "task",
        "id": "t-1",
        "contextId": "c-1",
        "status": {"state": "working"},
    }
    reply = pb.Message(message_id="r", role=pb.ROLE_AGENT, parts=[pb.Part(text="hi")])
    result = method.result(pb.SendMessageResponse(message=reply))
    assert result == {
        "kind": "message",
        "messageId": "r",
        "role": "agent",
        "parts": [{"kind": "text", "text": "hi"}],
    }


def test_text_part_keeps_metadata() -> None:
    part = send(user({"kind": "text", "text": "a", "metadata": {"k": 1}})).message.parts[0]
    assert part.text == "a" and json_format.MessageToDict(part.metadata) == {"k": 1}
    assert compat03.part_out(codec.to_dict(part)) == {
        "kind": "text",
        "text": "a",
        "metadata": {"k": 1},
    }


def test_file_part_with_bytes_renames_fields_both_ways() -> None:
    file = {"bytes": "aGk=", "mimeType": "text/plain", "name": "a.txt"}
    part = send(user({"kind": "file", "file": file})).message.parts[0]
    assert (part.raw, part.media_type, part.filename) == (b"hi", "text/plain", "a.txt")
    assert compat03.part_out(codec.to_dict(part)) == {"kind": "file", "file": file}


def test_file_part_with_uri_renames_fields_both_ways() -> None:
    file = {"uri": "https://x.example/f.pdf", "mimeType": "application/pdf"}
    part = send(user({"kind": "file", "file": file})).message.parts[0]
    assert (part.url, part.media_type, part.filename) == (file["uri"], "application/pdf", "")
    assert compat03.part_out(codec.to_dict(part)) == {"kind": "file", "file": file}


def test_file_bytes_accept_base64url_and_unpadded() -> None:
    raw = bytes([0xFB, 0xFF])
    for text in ("+/8=", "-_8", "+/8"):
        part = send(user({"kind": "file", "file": {"bytes": text}})).message.parts[0]
        assert part.raw == raw


def test_object_data_part_is_unchanged() -> None:
    part = send(user({"kind": "data", "data": {"a": [1, "x"]}})).message.parts[0]
    assert json_format.MessageToDict(part.data) == {"a": [1, "x"]}
    assert compat03.part_out(codec.to_dict(part)) == {"kind": "data", "data": {"a": [1, "x"]}}


@pytest.mark.parametrize("value", [[1, 2], "text", 3.5, True, None])
def test_non_object_data_travels_as_value_with_the_compat_flag(value: Any) -> None:
    part = pb.Part()
    json_format.ParseDict(value, part.data)
    out = compat03.part_out(codec.to_dict(part))
    assert out == {"kind": "data", "data": {"value": value}, "metadata": {"data_part_compat": True}}
    back = send(user(out)).message.parts[0]
    assert back.WhichOneof("content") == "data"
    assert json_format.MessageToDict(back.data) == value
    assert not back.HasField("metadata")  # the flag is removed again


def test_data_compat_flag_keeps_other_metadata() -> None:
    part_in = {
        "kind": "data",
        "data": {"value": 7},
        "metadata": {"data_part_compat": True, "k": "v"},
    }
    part = send(user(part_in)).message.parts[0]
    assert json_format.MessageToDict(part.metadata) == {"k": "v"}
    assert compat03.part_out(codec.to_dict(part)) == part_in


def _status(state: int) -> pb.StreamResponse:
    return pb.StreamResponse(
        status_update=pb.TaskStatusUpdateEvent(
            task_id="t",
            context_id="c",
            status=pb.TaskStatus(state=state),  # type: ignore[arg-type]
        )
    )


@pytest.mark.parametrize(
    ("state", "final"),
    [
        (pb.TASK_STATE_WORKING, False),
        (pb.TASK_STATE_SUBMITTED, False),
        (pb.TASK_STATE_INPUT_REQUIRED, True),
        (pb.TASK_STATE_AUTH_REQUIRED, True),
        (pb.TASK_STATE_COMPLETED, True),
        (pb.TASK_STATE_FAILED, True),
        (pb.TASK_STATE_CANCELED, True),
        (pb.TASK_STATE_REJECTED, True),
    ],
)
def test_status_update_final_when_terminal_or_interrupted(state: int, final: bool) -> None:
    event = compat03.stream_event(_status(state))
    assert event["kind"] == "status-update"
    assert (event["taskId"], event["contextId"], event["final"]) == ("t", "c", final)


def test_status_timestamp_is_utc_z() -> None:
    status = pb.TaskStatus(state=pb.TASK_STATE_COMPLETED)
    status.timestamp.FromJsonString("2025-10-28T12:30:00.250+02:00")
    task = pb.Task(id="t", context_id="c", status=status)
    assert compat03.task_out(codec.to_dict(task))["status"]["timestamp"] == (
        "2025-10-28T10:30:00.250Z"
    )


def test_artifact_update_event() -> None:
    event = pb.StreamResponse(
        artifact_update=pb.TaskArtifactUpdateEvent(
            task_id="t",
            context_id="c",
            artifact=pb.Artifact(artifact_id="a", name="n", parts=[pb.Part(text="x")]),
            append=True,
        )
    )
    assert compat03.stream_event(event) == {
        "kind": "artifact-update",
        "taskId": "t",
        "contextId": "c",
        "artifact": {"artifactId": "a", "name": "n", "parts": [{"kind": "text", "text": "x"}]},
        "append": True,
        "lastChunk": False,
    }


def test_stream_task_and_message_events_are_bare() -> None:
    task = pb.Task(id="t", context_id="c", status=pb.TaskStatus(state=pb.TASK_STATE_SUBMITTED))
    assert compat03.stream_event(pb.StreamResponse(task=task))["kind"] == "task"
    msg = pb.Message(message_id="r", role=pb.ROLE_AGENT, parts=[pb.Part(text="x")])
    assert compat03.stream_event(pb.StreamResponse(message=msg))["kind"] == "message"


@pytest.mark.parametrize(("blocking", "immediately"), [(None, False), (True, False), (False, True)])
def test_blocking_is_the_inverse_of_return_immediately(
    blocking: bool | None, immediately: bool
) -> None:
    config: dict[str, Any] = {"acceptedOutputModes": ["text/plain"]}
    if blocking is not None:
        config["blocking"] = blocking
    request = send(user(TEXT), configuration=config)
    assert request.configuration.return_immediately is immediately
    assert list(request.configuration.accepted_output_modes) == ["text/plain"]


def test_history_length_zero_means_unset() -> None:
    request = send(user(TEXT), configuration={"historyLength": 0})
    assert not request.configuration.HasField("history_length")
    request = send(user(TEXT), configuration={"historyLength": 3})
    assert request.configuration.history_length == 3
    assert not compat03.get_task_request({"id": "t", "historyLength": 0}).HasField("history_length")
    assert compat03.get_task_request({"id": "t", "historyLength": 2}).history_length == 2


def test_inline_push_config_is_renamed_and_flattened() -> None:
    push = {
        "url": "https://hook.example/a",
        "token": "tok",
        "authentication": {"schemes": ["Bearer", "Basic"], "credentials": "c"},
    }
    request = send(user(TEXT), configuration={"pushNotificationConfig": push})
    config = request.configuration.task_push_notification_config
    assert (config.url, config.token) == ("https://hook.example/a", "tok")
    assert (config.authentication.scheme, config.authentication.credentials) == ("Bearer", "c")


def test_push_set_nests_and_flattens() -> None:
    params = {
        "taskId": "t-1",
        "pushNotificationConfig": {
            "id": "cfg",
            "url": "https://hook.example/a",
            "authentication": {"schemes": ["Bearer"]},
        },
    }
    request = compat03.METHODS["tasks/pushNotificationConfig/set"].parse(params)
    assert isinstance(request, pb.TaskPushNotificationConfig)
    assert (request.task_id, request.id, request.url) == ("t-1", "cfg", "https://hook.example/a")
    result = compat03.push_config_out(codec.to_dict(request))
    assert result == params


def test_push_set_without_id_uses_the_task_id() -> None:
    params = {"taskId": "t-1", "pushNotificationConfig": {"url": "https://h.example"}}
    assert compat03.set_push_config_request(params).id == "t-1"


def test_push_get_and_delete_id_changes_meaning() -> None:
    params = {"id": "t-1", "pushNotificationConfigId": "cfg"}
    get = compat03.get_push_config_request(params)
    delete = compat03.delete_push_config_request(params)
    assert (get.task_id, get.id) == ("t-1", "cfg")
    assert (delete.task_id, delete.id) == ("t-1", "cfg")
    # without a config id, the 0.3 default config (id = task id)
    assert compat03.get_push_config_request({"id": "t-1"}).id == "t-1"


def test_push_list_is_a_bare_array_and_delete_is_null() -> None:
    listed = compat03.METHODS["tasks/pushNotificationConfig/list"]
    assert compat03.list_push_configs_request({"id": "t-1"}).task_id == "t-1"
    response = pb.ListTaskPushNotificationConfigsResponse(
        configs=[pb.TaskPushNotificationConfig(task_id="t-1", id="a", url="https://h.example")]
    )
    assert listed.result is not None
    assert listed.result(response) == [
        {"taskId": "t-1", "pushNotificationConfig": {"url": "https://h.example", "id": "a"}}
    ]
    deleted = compat03.METHODS["tasks/pushNotificationConfig/delete"]
    assert deleted.result is not None and deleted.result(empty_pb2.Empty()) is None


def test_get_cancel_resubscribe_params() -> None:
    assert compat03.get_task_request({"id": "t", "metadata": {"a": 1}}).id == "t"
    cancel = compat03.cancel_task_request({"id": "t", "metadata": {"a": 1}})
    assert cancel.id == "t" and json_format.MessageToDict(cancel.metadata) == {"a": 1}
    assert compat03.subscribe_request({"id": "t"}).id == "t"


def test_snake_case_names_are_accepted() -> None:
    message = {"message_id": "m", "role": "user", "parts": [TEXT], "context_id": "c"}
    request = send(message, configuration={"accepted_output_modes": ["a/b"]})
    assert (request.message.message_id, request.message.context_id) == ("m", "c")


def test_every_method_names_a_schema_rpc() -> None:
    from a2a_gateway.protocol.service import SERVICE_DESCRIPTOR

    rpcs = {m.name: m for m in SERVICE_DESCRIPTOR.methods}
    for method in compat03.METHODS.values():
        assert method.rpc in rpcs
        assert (method.result is None) == rpcs[method.rpc].server_streaming
    # tasks/list is not in the 0.3 spec, but deployed 0.3 peers call it (issue 10 item 12)
    assert compat03.METHODS["tasks/list"].rpc == "ListTasks"


# --- round trips ------------------------------------------------------------------------


def test_message_round_trip_through_0_3() -> None:
    original = pb.Message(
        message_id="m",
        role=pb.ROLE_USER,
        context_id="c",
        task_id="t",
        reference_task_ids=["r"],
        extensions=["urn:x"],
        parts=[
            pb.Part(text="a"),
            pb.Part(raw=b"\x00\x01", media_type="application/octet-stream", filename="b"),
            pb.Part(url="https://x.example/f"),
        ],
    )
    original.metadata.update({"k": "v"})
    data = pb.Part()
    json_format.ParseDict([1, {"x": None}], data.data)
    original.parts.append(data)
    obj = pb.Part()
    obj.data.struct_value.update({"y": 2})
    original.parts.append(obj)
    legacy = compat03.message_out(codec.to_dict(original))
    assert compat03.message_in(legacy, "message") == original


def test_task_output_has_history_and_artifacts() -> None:
    task = pb.Task(
        id="t",
        context_id="c",
        status=pb.TaskStatus(
            state=pb.TASK_STATE_INPUT_REQUIRED,
            message=pb.Message(message_id="q", role=pb.ROLE_AGENT, parts=[pb.Part(text="?")]),
        ),
        history=[pb.Message(message_id="m", role=pb.ROLE_USER, parts=[pb.Part(text="hi")])],
        artifacts=[pb.Artifact(artifact_id="a", parts=[pb.Part(text="x")])],
    )
    out = compat03.task_out(codec.to_dict(task))
    assert out["status"]["state"] == "input-required"
    assert out["status"]["message"]["kind"] == "message"
    assert out["history"][0]["role"] == "user"
    assert out["artifacts"] == [{"artifactId": "a", "parts": [{"kind": "text", "text": "x"}]}]


# --- errors -----------------------------------------------------------------------------


@pytest.mark.parametrize("cls", errors.ALL_ERRORS)
def test_error_codes_are_0_3_codes(cls: type[errors.A2AError]) -> None:
    error = cls("boom", metadata={"taskId": "t"})
    obj = compat03.error_object(error)
    code = cls.spec.jsonrpc_code
    if code in (-32008, -32009):
        assert obj["code"] == -32603  # 1.0-only, as the SDK maps them
    else:
        assert obj["code"] == code
    assert obj["message"] == "boom"
    assert obj["data"]["reason"] == cls.spec.reason and obj["data"]["taskId"] == "t"


def test_error_data_lists_field_violations() -> None:
    with pytest.raises(errors.InvalidParamsError) as caught:
        send(user())
    obj = compat03.error_object(caught.value)
    assert obj["code"] == -32602
    assert obj["data"]["fieldViolations"][0]["field"] == "params.message.parts"


# --- bad 0.3 input: InvalidParams naming the field --------------------------------------

BAD: list[tuple[str, Any, str]] = [
    ("message/send", {}, "params.message"),
    ("message/send", {"message": "x"}, "params.message"),
    ("message/send", {"message": user(TEXT) | {"role": "ROLE_USER"}}, "params.message.role"),
    ("message/send", {"message": user(TEXT) | {"messageId": ""}}, "params.message.messageId"),
    ("message/send", {"message": user(TEXT) | {"messageId": 5}}, "params.message.messageId"),
    ("message/send", {"message": user(TEXT) | {"kind": "task"}}, "params.message.kind"),
    ("message/send", {"message": user()}, "params.message.parts"),
    ("message/send", {"message": user({"kind": "image"})}, "params.message.parts[0].kind"),
    ("message/send", {"message": user({"kind": "text"})}, "params.message.parts[0].text"),
    (
        "message/send",
        {"message": user({"kind": "file", "file": {}})},
        "params.message.parts[0].file",
    ),
    (
        "message/send",
        {"message": user({"kind": "file", "file": {"bytes": "!!", "uri": "u"}})},
        "params.message.parts[0].file",
    ),
    (
        "message/send",
        {"message": user({"kind": "file", "file": {"bytes": "%%%"}})},
        "params.message.parts[0].file.bytes",
    ),
    (
        "message/send",
        {"message": user({"kind": "data", "data": [1]})},
        "params.message.parts[0].data",
    ),
    (
        "message/send",
        {"message": user({"kind": "data", "data": {}, "metadata": {"data_part_compat": True}})},
        "params.message.parts[0].data.value",
    ),
    (
        "message/send",
        {"message": user(TEXT), "configuration": {"blocking": "yes"}},
        "params.configuration.blocking",
    ),
    (
        "message/send",
        {"message": user(TEXT), "configuration": {"historyLength": -1}},
        "params.configuration.historyLength",
    ),
    (
        "message/send",
        {"message": user(TEXT), "configuration": {"pushNotificationConfig": {}}},
        "params.configuration.pushNotificationConfig.url",
    ),
    ("message/send", {"message": user(TEXT), "metadata": [1]}, "params.metadata"),
    ("tasks/get", {}, "params.id"),
    ("tasks/get", {"id": 3}, "params.id"),
    ("tasks/get", {"id": "t", "historyLength": "2"}, "params.historyLength"),
    ("tasks/cancel", {"id": ""}, "params.id"),
    ("tasks/resubscribe", {}, "params.id"),
    ("tasks/pushNotificationConfig/set", {"taskId": "t"}, "params.pushNotificationConfig"),
    (
        "tasks/pushNotificationConfig/set",
        {"taskId": "t", "pushNotificationConfig": {"url": "https://h", "authentication": 1}},
        "params.pushNotificationConfig.authentication",
    ),
    ("tasks/pushNotificationConfig/get", {"pushNotificationConfigId": "c"}, "params.id"),
    ("tasks/pushNotificationConfig/list", {}, "params.id"),
    (
        "tasks/pushNotificationConfig/delete",
        {"id": "t", "pushNotificationConfigId": 1},
        "params.pushNotificationConfigId",
    ),
]


@pytest.mark.parametrize(("method", "params", "field"), BAD)
def test_bad_input_is_invalid_params_naming_the_field(method: str, params: Any, field: str) -> None:
    with pytest.raises(errors.InvalidParamsError) as caught:
        compat03.METHODS[method].parse(params)
    assert caught.value.message.startswith(field + ": "), caught.value.message


def test_params_must_be_an_object_and_not_too_deep() -> None:
    with pytest.raises(errors.InvalidParamsError):
        compat03.get_task_request([1])
    deep: Any = "x"
    for _ in range(40):
        deep = {"d": deep}
    with pytest.raises(errors.InvalidParamsError):
        send(user(TEXT), metadata=deep)


# --- agent card (§14.3) -----------------------------------------------------------------


def _card() -> pb.AgentCard:
    card = pb.AgentCard(
        name="A",
        description="d",
        version="1",
        supported_interfaces=[
            pb.AgentInterface(
                url="https://a/rpc", protocol_binding="JSONRPC", protocol_version="1.0"
            ),
            pb.AgentInterface(
                url="https://a/rpc", protocol_binding="JSONRPC", protocol_version="0.3"
            ),
            pb.AgentInterface(
                url="https://a/v1", protocol_binding="HTTP+JSON", protocol_version="0.3"
            ),
        ],
        capabilities=pb.AgentCapabilities(streaming=True, extended_agent_card=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[pb.AgentSkill(id="s", name="S", description="sd", tags=["t"])],
    )
    card.security_schemes["key"].api_key_security_scheme.CopyFrom(
        pb.APIKeySecurityScheme(location="header", name="X-API-Key")
    )
    card.security_schemes["bearer"].http_auth_security_scheme.CopyFrom(
        pb.HTTPAuthSecurityScheme(scheme="Bearer")
    )
    flows = card.security_schemes["oauth"].oauth2_security_scheme.flows
    flows.client_credentials.CopyFrom(
        pb.ClientCredentialsOAuthFlow(token_url="https://t", scopes={"r": "read"})
    )
    card.security_requirements.add().schemes["key"].list.append("r")
    card.skills[0].security_requirements.add().schemes["bearer"].SetInParent()
    return card


def test_0_3_card_from_a_1_0_card() -> None:
    legacy = compat03.agent_card(codec.to_dict(_card()))
    assert legacy is not None
    assert legacy["url"] == "https://a/rpc"
    assert legacy["preferredTransport"] == "JSONRPC"
    assert legacy["protocolVersion"] == "0.3.0"
    assert legacy["additionalInterfaces"] == [{"url": "https://a/v1", "transport": "HTTP+JSON"}]
    assert legacy["supportsAuthenticatedExtendedCard"] is True
    assert legacy["capabilities"] == {"streaming": True}
    assert legacy["securitySchemes"] == {
        "key": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
        "bearer": {"type": "http", "scheme": "Bearer"},
        "oauth": {
            "type": "oauth2",
            "flows": {"clientCredentials": {"tokenUrl": "https://t", "scopes": {"r": "read"}}},
        },
    }
    assert legacy["security"] == [{"key": ["r"]}]
    assert legacy["skills"][0]["security"] == [{"bearer": []}]
    assert "securityRequirements" not in legacy["skills"][0]


def test_hybrid_card_keeps_every_1_0_key_and_adds_the_0_3_ones() -> None:
    plain = codec.to_dict(_card())
    hybrid = compat03.hybrid_card(codec.to_dict(_card()))
    for key, value in plain.items():
        if key not in ("securitySchemes", "skills"):
            assert hybrid[key] == value
    assert hybrid["securitySchemes"]["key"]["apiKeySecurityScheme"] == {
        "location": "header",
        "name": "X-API-Key",
    }
    assert hybrid["securitySchemes"]["key"]["type"] == "apiKey"
    assert hybrid["url"] == "https://a/rpc" and hybrid["protocolVersion"] == "0.3.0"
    # a 1.0 parser that ignores unknown keys reads the same card
    assert json_format.ParseDict(hybrid, pb.AgentCard(), ignore_unknown_fields=True) == _card()


def test_card_without_a_0_3_interface() -> None:
    card = _card()
    del card.supported_interfaces[1:]
    assert compat03.agent_card(codec.to_dict(card)) is None
    assert compat03.hybrid_card(codec.to_dict(card)) == codec.to_dict(card)
    method = compat03.METHODS["agent/getAuthenticatedExtendedCard"]
    assert method.result is not None
    with pytest.raises(errors.VersionNotSupportedError):
        method.result(card)


@pytest.mark.parametrize(
    ("value", "legacy"),
    [
        ("0.3", True),
        ("0.3.0", True),
        (" 0.3.9 ", True),
        ("1.0", False),
        ("0.2", False),
        ("", False),
    ],
)
def test_is_legacy_version(value: str, legacy: bool) -> None:
    assert compat03.is_legacy_version(value) is legacy


# --- client side: 1.0 requests -> 0.3 params, 0.3 results -> 1.0 (round trips) ----------


def _rich_message(role: int = pb.ROLE_USER) -> pb.Message:
    message = pb.Message(
        message_id="m-9",
        role=role,  # type: ignore[arg-type]
        context_id="c-9",
        task_id="t-9",
        reference_task_ids=["t-1"],
        extensions=["urn:x"],
        parts=[
            pb.Part(text="hi"),
            pb.Part(raw=b"\x00\x01", media_type="application/octet-stream", filename="a.bin"),
            pb.Part(url="https://files.example/b", media_type="text/plain"),
        ],
    )
    message.parts.add().data.struct_value.update({"k": [1, "two"]})
    message.parts.add().data.number_value = 7
    message.metadata.update({"trace": "x"})
    return message


def _rich_request() -> pb.SendMessageRequest:
    request = pb.SendMessageRequest(message=_rich_message())
    config = request.configuration
    config.accepted_output_modes.append("text/plain")
    config.history_length = 3
    config.return_immediately = True
    push = config.task_push_notification_config
    push.id, push.url, push.token = "p-1", "https://hook.example/x", "tok"
    push.authentication.scheme, push.authentication.credentials = "Bearer", "cred"
    request.metadata.update({"m": 1})
    return request


def test_send_request_round_trips_through_0_3_params() -> None:
    request = _rich_request()
    params = compat03.send_params(request)
    assert params["configuration"]["blocking"] is False
    assert params["message"]["kind"] == "message" and params["message"]["role"] == "user"
    back = compat03.send_message_request(params)
    # push config: the 0.3 config has no task id; everything else survives
    request.configuration.task_push_notification_config.ClearField("task_id")
    assert back == request


def test_send_request_without_configuration_says_blocking() -> None:
    """0.3 REST and gRPC agents read an absent ``blocking`` as false: always sent."""
    request = pb.SendMessageRequest(message=_rich_message())
    params = compat03.send_params(request)
    assert params["configuration"] == {"blocking": True}
    parsed = compat03.send_message_request(params)
    assert parsed.message == request.message
    assert not parsed.configuration.return_immediately


@pytest.mark.parametrize(
    ("rpc", "request_message", "parse"),
    [
        ("GetTask", pb.GetTaskRequest(id="t", history_length=2), compat03.get_task_request),
        ("GetTask", pb.GetTaskRequest(id="t"), compat03.get_task_request),
        ("CancelTask", pb.CancelTaskRequest(id="t"), compat03.cancel_task_request),
        ("SubscribeToTask", pb.SubscribeToTaskRequest(id="t"), compat03.subscribe_request),
        (
            "CreateTaskPushNotificationConfig",
            pb.TaskPushNotificationConfig(task_id="t", id="p", url="https://h.example/", token="k"),
            compat03.set_push_config_request,
        ),
        (
            "GetTaskPushNotificationConfig",
            pb.GetTaskPushNotificationConfigRequest(task_id="t", id="p"),
            compat03.get_push_config_request,
        ),
        (
            "ListTaskPushNotificationConfigs",
            pb.ListTaskPushNotificationConfigsRequest(task_id="t"),
            compat03.list_push_configs_request,
        ),
        (
            "DeleteTaskPushNotificationConfig",
            pb.DeleteTaskPushNotificationConfigRequest(task_id="t", id="p"),
            compat03.delete_push_config_request,
        ),
    ],
)
def test_requests_round_trip_through_0_3_params(rpc: str, request_message: Any, parse: Any) -> None:
    call = compat03.legacy_call(rpc)
    assert compat03.METHODS[call.method].rpc == rpc  # the server reads what the client sends
    assert parse(call.params(request_message)) == request_message


def test_push_get_param_id_is_the_task_id() -> None:
    params = compat03.get_push_config_params(
        pb.GetTaskPushNotificationConfigRequest(task_id="task", id="cfg")
    )
    assert params == {"id": "task", "pushNotificationConfigId": "cfg"}


def test_list_tasks_has_no_0_3_call() -> None:
    with pytest.raises(errors.UnsupportedOperationError, match="ListTasks does not exist"):
        compat03.legacy_call("ListTasks")
    with pytest.raises(errors.UnsupportedOperationError):
        compat03.rest_call("ListTasks", pb.ListTasksRequest())


def _rich_task() -> pb.Task:
    task = pb.Task(id="t-9", context_id="c-9")
    task.status.state = pb.TASK_STATE_INPUT_REQUIRED
    task.status.message.CopyFrom(_rich_message(pb.ROLE_AGENT))
    task.status.timestamp.FromJsonString("2026-01-02T03:04:05.123Z")
    task.history.append(_rich_message())
    artifact = task.artifacts.add(artifact_id="a-1", name="response", description="d")
    artifact.parts.add().text = "out"
    artifact.metadata.update({"x": True})
    task.metadata.update({"k": "v"})
    return task


@pytest.mark.parametrize("state", [s for _, s in compat03.TASK_STATES])
def test_task_result_round_trips_every_state(state: int) -> None:
    task = _rich_task()
    task.status.state = state  # type: ignore[assignment]
    legacy = compat03.METHODS["tasks/get"].result(task)  # type: ignore[misc]
    assert compat03.task_result_in(legacy) == task


def test_send_results_round_trip() -> None:
    result = compat03.METHODS["message/send"].result
    assert result is not None
    for response in (
        pb.SendMessageResponse(task=_rich_task()),
        pb.SendMessageResponse(message=_rich_message(pb.ROLE_AGENT)),
    ):
        assert compat03.send_result_in(result(response)) == response


def _events() -> list[pb.StreamResponse]:
    status = pb.StreamResponse()
    status.status_update.task_id, status.status_update.context_id = "t", "c"
    status.status_update.status.state = pb.TASK_STATE_COMPLETED
    status.status_update.metadata.update({"k": 1})
    artifact = pb.StreamResponse()
    update = artifact.artifact_update
    update.task_id, update.context_id, update.append, update.last_chunk = "t", "c", True, True
    update.artifact.artifact_id = "a"
    update.artifact.parts.add().text = "chunk"
    return [
        pb.StreamResponse(task=_rich_task()),
        pb.StreamResponse(message=_rich_message(pb.ROLE_AGENT)),
        status,
        artifact,
    ]


@pytest.mark.parametrize("event", _events(), ids=lambda e: e.WhichOneof("payload"))
def test_stream_events_round_trip(event: pb.StreamResponse) -> None:
    legacy = compat03.stream_event(event)
    assert compat03.stream_response_in(legacy) == event
    # the same over 0.3 REST (0.3 proto JSON: content, TASK_STATE_*, ROLE_*), whose
    # messages have no referenceTaskIds
    expected = pb.StreamResponse()
    expected.CopyFrom(event)
    member = expected.WhichOneof("payload")
    for message in _messages_of(getattr(expected, member)) if member in ("task", "message") else []:
        message.ClearField("reference_task_ids")
    assert compat03.rest_stream_response_in(compat03.rest_stream_event(event)) == expected


def test_0_3_results_from_other_peers_are_read() -> None:
    """What 0.3 peers send that our server never does: no ``kind``, ``+00:00`` or
    zone-less timestamps, snake_case keys, ``final``, a data part wrapped for compat."""
    task = compat03.task_result_in(
        {
            "id": "t",
            "context_id": "c",
            "status": {"state": "completed", "timestamp": "2026-01-02T03:04:05.5+00:00"},
            "artifacts": [
                {
                    "artifactId": "a",
                    "parts": [
                        {
                            "kind": "data",
                            "data": {"value": [1]},
                            "metadata": {"data_part_compat": True},
                        }
                    ],
                }
            ],
        }
    )
    assert task.context_id == "c" and task.status.state == pb.TASK_STATE_COMPLETED
    assert task.status.timestamp.ToJsonString() == "2026-01-02T03:04:05.500Z"
    assert json_format.MessageToDict(task.artifacts[0].parts[0]) == {"data": [1.0]}
    naive = compat03.task_result_in(
        {
            "id": "t",
            "contextId": "c",
            "status": {"state": "working", "timestamp": "2026-01-02T03:04:05"},
        }
    )
    assert naive.status.timestamp.ToJsonString() == "2026-01-02T03:04:05Z"
    event = compat03.stream_response_in(
        {"taskId": "t", "contextId": "c", "status": {"state": "canceled"}, "final": True}
    )
    assert event.status_update.status.state == pb.TASK_STATE_CANCELED


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ([], "result"),
        ({"kind": "task", "id": "t", "status": {"state": "asleep"}}, "result.status.state"),
        (
            {"kind": "task", "id": "t", "history": [{"parts": [{"kind": "x"}]}]},
            "result.history[0].parts[0].kind",
        ),
        (
            {"kind": "task", "id": "t", "artifacts": [{"parts": [{"kind": "file", "file": {}}]}]},
            "result.artifacts[0].parts[0].file",
        ),
    ],
)
def test_unreadable_results_name_the_field(value: Any, field: str) -> None:
    with pytest.raises(errors.InvalidAgentResponseError, match=rf"^{re.escape(field)}: "):
        compat03.task_result_in(value)


def test_push_config_results_round_trip() -> None:
    config = pb.TaskPushNotificationConfig(task_id="t", id="p", url="https://h.example/", token="k")
    config.authentication.scheme = "Bearer"
    config.authentication.credentials = "c"
    method = compat03.METHODS["tasks/pushNotificationConfig/get"]
    assert method.result is not None
    assert compat03.push_config_result_in(method.result(config)) == config
    listing = pb.ListTaskPushNotificationConfigsResponse(configs=[config, config])
    listed = compat03.METHODS["tasks/pushNotificationConfig/list"].result(listing)  # type: ignore[misc]
    assert compat03.push_list_result_in(listed) == listing
    assert compat03.push_list_result_in(None) == pb.ListTaskPushNotificationConfigsResponse()
    assert compat03.empty_result_in(None) == empty_pb2.Empty()


def test_errors_come_back_in_the_1_0_shape() -> None:
    error = errors.TaskNotFoundError("gone", metadata={"taskId": "t-9"})
    back = compat03.error_in(compat03.error_object(error))
    assert back["code"] == -32001 and back["message"] == "gone"
    assert back["data"][0]["reason"] == "TASK_NOT_FOUND"
    assert back["data"][0]["metadata"] == {"taskId": "t-9"}
    # a 1.0-only error travelled as -32603: its reason still names it
    version = compat03.error_in(compat03.error_object(errors.VersionNotSupportedError("v")))
    assert version["code"] == -32603 and version["data"][0]["reason"] == "VERSION_NOT_SUPPORTED"
    # free-form 0.3 data is dropped: the code alone decides
    assert compat03.error_in({"code": -32002, "message": "m", "data": "text"}) == {
        "code": -32002,
        "message": "m",
    }
    invalid = errors.InvalidParamsError(
        "bad", violations=[errors.FieldViolation("params.message", "is required")]
    )
    details = compat03.error_in(compat03.error_object(invalid))["data"]
    assert details[1]["fieldViolations"] == [
        {"field": "params.message", "description": "is required"}
    ]


# --- client side over 0.3 REST: what the client sends is what our server reads -------------


@pytest.mark.parametrize(
    ("rpc", "request_message"),
    [
        ("SendMessage", _rich_request()),
        ("SendStreamingMessage", pb.SendMessageRequest(message=_rich_message())),
        ("GetTask", pb.GetTaskRequest(id="t/1", history_length=2)),
        ("CancelTask", pb.CancelTaskRequest(id="t")),
        ("SubscribeToTask", pb.SubscribeToTaskRequest(id="t")),
        (
            "CreateTaskPushNotificationConfig",
            # a resource name is not a URL: "%41" stays as it is (the SDK does not escape)
            pb.TaskPushNotificationConfig(task_id="t%41", id="p", url="https://h.example/"),
        ),
        (
            "GetTaskPushNotificationConfig",
            pb.GetTaskPushNotificationConfigRequest(task_id="t", id="p"),
        ),
        (
            "ListTaskPushNotificationConfigs",
            pb.ListTaskPushNotificationConfigsRequest(task_id="t"),
        ),
        (
            "DeleteTaskPushNotificationConfig",
            pb.DeleteTaskPushNotificationConfigRequest(task_id="t", id="p"),
        ),
        ("GetExtendedAgentCard", pb.GetExtendedAgentCardRequest()),
    ],
)
def test_rest_calls_round_trip_through_the_0_3_rest_routes(rpc: str, request_message: Any) -> None:
    call = compat03.rest_call(rpc, request_message)
    match = compat03.rest_match(call.path)
    assert match is not None, call.path
    method = match.method(call.http_method)
    assert method is not None and method.rpc == rpc
    body = codec.loads(codec.dumps(call.body)) if call.body is not None else None
    parsed = method.parse(match.params(call.http_method, call.query, body))
    expected = type(request_message)()
    expected.CopyFrom(request_message)
    if rpc == "SendMessage":
        # 0.3 REST messages have no referenceTaskIds; the inline push config no task id
        expected.message.ClearField("reference_task_ids")
        expected.configuration.task_push_notification_config.ClearField("task_id")
    if rpc == "SendStreamingMessage":
        expected.message.ClearField("reference_task_ids")
        expected.configuration.SetInParent()  # ``blocking: true`` is always sent
    assert parsed == expected


def test_rest_results_round_trip() -> None:
    for rpc, result in (
        ("SendMessage", pb.SendMessageResponse(task=_rich_task())),
        ("SendMessage", pb.SendMessageResponse(message=_rich_message(pb.ROLE_AGENT))),
        ("GetTask", _rich_task()),
        ("CancelTask", _rich_task()),
        (
            "GetTaskPushNotificationConfig",
            # a resource name is not a URL: "%41" stays as it is (the SDK does not escape)
            pb.TaskPushNotificationConfig(task_id="t%41", id="p", url="https://h.example/"),
        ),
        (
            "ListTaskPushNotificationConfigs",
            pb.ListTaskPushNotificationConfigsResponse(
                configs=[pb.TaskPushNotificationConfig(task_id="t%41", id="p", url="https://h/")]
            ),
        ),
        ("DeleteTaskPushNotificationConfig", empty_pb2.Empty()),
    ):
        call = compat03.legacy_call(rpc)
        method = compat03.METHODS[call.method]
        wire = codec.loads(codec.dumps(compat03.rest_result(method, result)))
        assert call.result is not None
        back = call.result(compat03.rest_result_in(rpc, wire), "body")
        expected: Any = type(result)()
        expected.CopyFrom(result)
        for message in _messages_of(expected):
            message.ClearField("reference_task_ids")  # not in the 0.3 proto
        assert back == expected, rpc


def _messages_of(value: Any) -> list[pb.Message]:
    if isinstance(value, pb.Message):
        return [value]
    task = value.task if isinstance(value, pb.SendMessageResponse) else value
    if isinstance(value, pb.SendMessageResponse) and value.HasField("message"):
        return [value.message]
    if isinstance(task, pb.Task):
        return [*task.history, task.status.message]
    return []


def test_rest_path_parameters_are_decoded_and_bad_utf8_is_invalid_params() -> None:
    found = compat03.rest_match("/v1/tasks/a%2Fb%C3%A9")
    assert found is not None
    assert found.params("GET", {}, None) == {"id": "a/bé", "historyLength": None}
    # refused as on the 1.0 routes, not read as another task id ("\ufffd")
    found = compat03.rest_match("/v1/tasks/%FF")
    assert found is not None
    with pytest.raises(errors.InvalidParamsError, match=r"^id: "):
        found.params("GET", {}, None)
    found = compat03.rest_match("/v1/tasks/t/pushNotificationConfigs/%C3")
    assert found is not None
    with pytest.raises(errors.InvalidParamsError, match=r"^pushNotificationConfigId: "):
        found.params("DELETE", {}, None)
