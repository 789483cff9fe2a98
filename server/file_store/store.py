"""The store of one workspace's task files: the set of its roles."""

from __future__ import annotations

from ..event_log import FileEventLog
from ..local_roles import (
    OneProcessCancels,
    OneProcessClaims,
    OneProcessEventLogs,
    PushConfigsInRecords,
)
from .reads import FileTaskReads
from .retention import FileRetention
from .retry_keys import FileRetryKeys
from .writes import FileTaskWrites


class WorkspaceTaskStore(
    FileTaskReads,
    FileTaskWrites,
    FileRetention,
    FileRetryKeys,
    OneProcessEventLogs[FileEventLog],
    OneProcessClaims,
    PushConfigsInRecords,
    OneProcessCancels,
):
    """Tasks as files under ``<workspace>/.a2a/tasks/`` (see the package docstring):
    the roles of its files (``reads``, ``writes``, ``retention``, ``retry_keys``, over
    :class:`~.folder.TaskFiles`) and those of a store of one process, its event logs
    in the task folder (:class:`~..event_log.FileEventLog`)."""
