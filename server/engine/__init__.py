"""The task engine: the local :class:`A2AService`. It runs an agent for each message,
keeps tasks in a :class:`~a2a_gateway.server.task_store.TaskStore`, streams their
events, and enforces the lifecycle rules of the protocol and of the seed. Before any
of them, the card's required extensions (:mod:`..extensions`): every operation but
GetExtendedAgentCard refuses a call that does not name one (ExtensionSupportRequired).

Decisions (digest §6 and §15 leave them open):

- Blocking SendMessage returns at a terminal or interrupted state (or, when the call
  has a deadline, at the deadline with the task as it is then). SendStreamingMessage
  closes at a terminal or interrupted state, like the SDK; SubscribeToTask closes only
  at a terminal state. Every task stream starts with the Task snapshot.
- SendMessage or SubscribeToTask on a terminal task: UnsupportedOperation.
  CancelTask on a terminal task: TaskNotCancelable. A task of another caller is
  TaskNotFound on every operation.
- Errors found before a stream's first event are raised by its first ``__anext__``.
- Interrupted = input-required or auth-required: a message with the task's id
  continues it (a different contextId is InvalidParams); in any other state it is
  UnsupportedOperation. One run per (caller, context) at a time; a second message gets
  UnsupportedOperation "context busy, retry when the current task ends".
- A retried message returns the existing task instead of running twice. A retry is the
  same message, not only the same id (:mod:`.retries`): the same caller, messageId,
  taskId, contextId and parts; any other message under a reused messageId is a new
  message (its taskId, contextId and inline push config honoured). SendMessage answers
  a retry with the existing task (a blocking call waits for it as usual). A
  SendStreamingMessage retry joins the task while its run is live (snapshot, then live
  events); once that run has ended there is nothing to stream and the message starts a
  new task (streams replay nothing, and load generators such as the bench reuse
  messageIds across runs). The retry keys live in the store: the workspace index on
  disk (they survive a restart; lost only when the index is rebuilt from the files),
  or, with the memory store, bounded by a count and a byte budget. A messageId longer
  than ``MAX_MESSAGE_ID_CHARS`` (256) is InvalidParams.
- ListTasks is a range query over the store's index (the workspace index on disk)
  merged with the live runs; an answer's tasks stay within ``list_max_bytes`` (8 MiB
  encoded; fewer tasks and a next page token when a page would exceed it).
- Hop guard: ``a2a-gateway.hops`` and ``volcanic.hops``, each from the request metadata,
  else the message metadata, the larger winning, else 0 (a non-negative integer, else
  InvalidParams; see protocol/hops.py); above ``max_hops`` the task is created and
  failed at once.
- Each run replaces the ``response`` artifact (same artifactId, ``append=false`` on the
  run's first chunk), so GetTask shows the latest answer.
- Runs belong to the engine, not to the request: a client that disconnects from a
  blocking or streaming call does not cancel the run (CancelTask does). Every run is
  bounded by ``run_timeout_s``.
- ``aclose`` (shutdown) cancels every live run; each is stored failed ("The server shut
  down during the run.") and its streams end after that event; streams waiting on an
  input-required task end with UnavailableError.

Module map: :mod:`.task_engine` (:class:`TaskEngine`, the A2AService facade that wires
the parts), :mod:`.state` (settings and tables the parts share), :mod:`.rules` (task
rules), :mod:`.continuation` (SendMessage: retries, continuation and context rules,
hop guard), :mod:`.turns` (running turns, CancelTask), :mod:`.reads` (GetTask,
ListTasks, SubscribeToTask), :mod:`.push_configs` (the push-config operations),
:mod:`.records` (persistence and restart recovery). A new capability adds a module
with a collaborator that takes the :class:`~.state.EngineState`.
"""

from .state import (
    CONTEXT_BUSY,
    DEFAULT_PAGE_SIZE,
    FLUSH_DELAY_S,
    MAX_PAGE_SIZE,
    MAX_PUSH_CONFIGS,
    SAVED_AS_KEY,
    SERVER_RESTARTED,
    SHUTDOWN,
    UNEXPECTED,
)
from .task_engine import TaskEngine

__all__ = [
    "CONTEXT_BUSY",
    "DEFAULT_PAGE_SIZE",
    "FLUSH_DELAY_S",
    "MAX_PAGE_SIZE",
    "MAX_PUSH_CONFIGS",
    "SAVED_AS_KEY",
    "SERVER_RESTARTED",
    "SHUTDOWN",
    "UNEXPECTED",
    "TaskEngine",
]
