"""ListTasks through the proxy: only the caller's own tasks, counted and paged by us.

The upstream sees one identity (ours), so its ListTasks answers every task any of our
callers created, and tasks created upstream by others. Filtering its pages would leave
``totalSize`` and the page boundaries counting tasks the caller cannot see. So the proxy
reads the upstream's whole list for the caller's filters (``contextId``, ``status``,
``statusTimestampAfter``; ``historyLength`` and ``includeArtifacts`` shape the tasks),
page after page in the upstream's order (newest first), keeps the tasks whose recorded
owner is the caller (:class:`~.proxy_owners.TaskOwners`; a task with no record is
nobody's), and answers one page of those with its own page token, bound to the caller
and the filters. ``totalSize`` is the number of the caller's tasks.

The walk is bounded: at most :data:`MAX_UPSTREAM_TASKS` upstream tasks are read for one
ListTasks (an upstream that lists more answers Unavailable with a message saying so),
each upstream call by the proxy's upstream timeout, and an upstream that repeats a page
token ends the walk.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from a2a_gateway.protocol.context import Caller
from a2a_gateway.protocol.errors import FieldViolation, InvalidParamsError, UnavailableError
from a2a_gateway.server.paging import PageTokens
from lf.a2a.v1 import a2a_pb2 as pb

from .proxy_owners import TaskOwners

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100
#: Tasks asked of the upstream per call (the spec's largest page).
UPSTREAM_PAGE_SIZE = 100
#: The most upstream tasks one ListTasks reads (the owners' memory bound).
MAX_UPSTREAM_TASKS = 100_000
TOO_MANY = "the upstream agent lists too many tasks to filter them through this gateway"

FetchPage = Callable[[pb.ListTasksRequest], Awaitable[pb.ListTasksResponse]]


async def list_own_tasks(
    request: pb.ListTasksRequest,
    caller: Caller,
    fetch: FetchPage,
    owners: TaskOwners,
    tokens: PageTokens,
) -> pb.ListTasksResponse:
    """One page of ``caller``'s tasks matching ``request`` (see the module docstring)."""
    page_size = DEFAULT_PAGE_SIZE
    if request.HasField("page_size"):
        page_size = request.page_size
        if not 1 <= page_size <= MAX_PAGE_SIZE:
            description = f"must be between 1 and {MAX_PAGE_SIZE}"
            raise InvalidParamsError(
                f"pageSize: {description}", violations=[FieldViolation("pageSize", description)]
            )
    after = ""
    if request.HasField("status_timestamp_after"):
        after = request.status_timestamp_after.ToJsonString()
    query = "\x00".join(
        (
            "proxy-tasks",
            caller.workspace,
            caller.name,
            request.context_id,
            str(request.status),
            after,
        )
    )
    offset, last_id = 0, ""
    if request.page_token:
        offset_text, _, last_id = tokens.read(request.page_token, query).partition(":")
        offset = int(offset_text)

    mine = await _callers_tasks(request, caller, fetch, owners)
    start = offset
    if last_id:  # after the last task shown, wherever newer tasks have moved it
        start = next((i + 1 for i, t in enumerate(mine) if t.id == last_id), offset)
    page = mine[start : start + page_size]
    next_token = ""
    if page and start + len(page) < len(mine):
        next_token = tokens.issue(f"{start + len(page)}:{page[-1].id}", query)
    return pb.ListTasksResponse(
        tasks=page, next_page_token=next_token, page_size=len(page), total_size=len(mine)
    )


async def _callers_tasks(
    request: pb.ListTasksRequest, caller: Caller, fetch: FetchPage, owners: TaskOwners
) -> list[pb.Task]:
    upstream = pb.ListTasksRequest()
    upstream.CopyFrom(request)
    upstream.ClearField("page_token")
    upstream.page_size = UPSTREAM_PAGE_SIZE
    mine: list[pb.Task] = []
    shown: set[str] = set()  # pages may overlap while tasks are being created
    read = 0
    tokens_seen: set[str] = set()
    while True:
        reply = await fetch(upstream)
        read += len(reply.tasks)
        if read > MAX_UPSTREAM_TASKS:
            raise UnavailableError(TOO_MANY)
        for task in reply.tasks:
            if task.id not in shown and owners.owns(caller, task.id):
                shown.add(task.id)
                mine.append(task)
        token = reply.next_page_token
        if not token or token in tokens_seen or not reply.tasks:
            return mine
        tokens_seen.add(token)
        upstream.page_token = token
