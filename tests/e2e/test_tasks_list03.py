"""0.3 ``tasks/list`` (issue 10 item 12) against a whole gateway (real engine, faux agent):
mapped to ListTasks, 0.3 shapes out, the caller's own tasks only, filters and paging as
on 1.0, and bad params InvalidParams naming the 0.3 field."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from a2a_gateway.serve import Gateway

from .conftest import KEY_ALICE, KEY_BOB


async def rpc(
    gateway: Gateway, key: str, method: str, params: Any, *, version: str | None = None
) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"}
    if version is not None:
        headers["A2A-Version"] = version
    body = {"jsonrpc": "2.0", "id": "l", "method": method, "params": params}
    url = f"http://127.0.0.1:{gateway.http_port}/a2a"
    timeout = aiohttp.ClientTimeout(total=30)
    async with (
        aiohttp.ClientSession(timeout=timeout) as http,
        http.post(url, json=body, headers=headers) as response,
    ):
        answer: dict[str, Any] = await response.json(content_type=None)
    assert answer["id"] == "l", answer
    return answer


def send03(text: str, message_id: str, context_id: str) -> dict[str, Any]:
    return {
        "message": {
            "kind": "message",
            "messageId": message_id,
            "contextId": context_id,
            "role": "user",
            "parts": [{"kind": "text", "text": text}],
        }
    }


async def seed(gateway: Gateway) -> list[str]:
    """Three completed tasks of alice (two in context c-a), one of bob; alice's ids,
    newest first."""
    ids = []
    for n, context in enumerate(("c-a", "c-b", "c-a")):
        answer = await rpc(gateway, KEY_ALICE, "message/send", send03("hi", f"m-{n}", context))
        ids.append(answer["result"]["id"])
    await rpc(gateway, KEY_BOB, "message/send", send03("hi", "m-bob", "c-a"))
    return ids[::-1]


async def test_tasks_list_is_list_tasks_in_0_3_shapes(gateway: Gateway) -> None:
    newest_first = await seed(gateway)
    answer = await rpc(gateway, KEY_ALICE, "tasks/list", {})
    result = answer["result"]
    assert [t["id"] for t in result["tasks"]] == newest_first  # alice's only
    assert result["totalSize"] == 3 and result["pageSize"] == 3
    assert result["nextPageToken"] == ""
    for task in result["tasks"]:
        assert task["kind"] == "task" and task["status"]["state"] == "completed"
        assert task["history"][0]["kind"] == "message"
        assert task["history"][0]["parts"][0] == {"kind": "text", "text": "hi"}
    # the same tasks as 1.0 ListTasks, in the same order
    listed = await rpc(gateway, KEY_ALICE, "ListTasks", {}, version="1.0")
    assert [t["id"] for t in listed["result"]["tasks"]] == newest_first
    # a 0.3 version header is the same 0.3 call; a 1.0 one is refused (one version rule)
    again = await rpc(gateway, KEY_ALICE, "tasks/list", {}, version="0.3")
    assert [t["id"] for t in again["result"]["tasks"]] == newest_first
    refused = await rpc(gateway, KEY_ALICE, "tasks/list", {}, version="1.0")
    assert refused["error"]["code"] == -32009
    bob = await rpc(gateway, KEY_BOB, "tasks/list", {"contextId": "c-b"})
    assert bob["result"]["tasks"] == [] and bob["result"]["totalSize"] == 0


# (params, ids expected as indexes into alice's newest-first ids)
FILTERS: list[tuple[dict[str, Any], list[int]]] = [
    ({"contextId": "c-a"}, [0, 2]),
    ({"contextId": "c-b"}, [1]),
    ({"contextId": "nope"}, []),
    ({"status": "completed"}, [0, 1, 2]),
    ({"status": "TASK_STATE_COMPLETED"}, [0, 1, 2]),  # the 1.0 name is read too
    ({"status": "working"}, []),
    ({"statusTimestampAfter": "2000-01-01T00:00:00Z"}, [0, 1, 2]),
    ({"statusTimestampAfter": "2999-01-01T00:00:00Z"}, []),
    ({"context_id": "c-b"}, [1]),  # snake_case aliases, as on every 0.3 method
]


async def test_filters(gateway: Gateway) -> None:
    ids = await seed(gateway)
    for params, expected in FILTERS:
        result = (await rpc(gateway, KEY_ALICE, "tasks/list", params))["result"]
        assert [t["id"] for t in result["tasks"]] == [ids[i] for i in expected], params


async def test_paging_and_views(gateway: Gateway) -> None:
    ids = await seed(gateway)
    seen: list[str] = []
    params: dict[str, Any] = {"pageSize": 2}
    while True:
        result = (await rpc(gateway, KEY_ALICE, "tasks/list", params))["result"]
        assert result["totalSize"] == 3
        seen += [t["id"] for t in result["tasks"]]
        if not result["nextPageToken"]:
            break
        params = {"pageSize": 2, "pageToken": result["nextPageToken"]}
    assert seen == ids
    bare = (await rpc(gateway, KEY_ALICE, "tasks/list", {"historyLength": 1}))["result"]
    assert all(len(t["history"]) == 1 for t in bare["tasks"])
    assert all("artifacts" not in t for t in bare["tasks"])  # ListTasks leaves them out
    full = (await rpc(gateway, KEY_ALICE, "tasks/list", {"includeArtifacts": True}))["result"]
    assert all(t["artifacts"][0]["parts"] for t in full["tasks"])


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"contextId": 5}, "params.contextId"),
        ({"status": "done"}, "params.status"),
        ({"status": 3}, "params.status"),
        ({"pageSize": "2"}, "params.pageSize"),
        ({"pageSize": -1}, "params.pageSize"),
        ({"pageSize": 1000}, "pageSize"),  # the engine's 1..100 rule, as on 1.0
        ({"pageToken": 1}, "params.pageToken"),
        ({"pageToken": "forged"}, "pageToken"),
        ({"historyLength": -2}, "params.historyLength"),
        ({"statusTimestampAfter": "yesterday"}, "params.statusTimestampAfter"),
        ({"statusTimestampAfter": 0}, "params.statusTimestampAfter"),
        ({"includeArtifacts": "yes"}, "params.includeArtifacts"),
    ],
)
async def test_bad_params_are_invalid_params_naming_the_field(
    gateway: Gateway, params: Any, field: str
) -> None:
    error = (await rpc(gateway, KEY_ALICE, "tasks/list", params))["error"]
    assert error["code"] == -32602, error
    assert error["data"]["fieldViolations"][0]["field"] == field, error
