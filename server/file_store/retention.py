"""Retention of task files (``--task-retention``): the oldest settled tasks removed."""

from __future__ import annotations

import logging
import os

from .folder import Stamp, TaskFiles, file_stamp
from .task_file import decode_record, remove_inbox_files

log = logging.getLogger(__name__)


class FileRetention(TaskFiles):
    """Removing settled tasks older than a cutoff: file, index row, event log."""

    async def expire(self, cutoff_ns: int, limit: int, *, files: bool = False) -> int:
        """Remove up to ``limit`` settled tasks whose status is older than the cutoff
        (file, then index row; with ``files`` also their inbox files). File work runs
        on the index's maintenance thread. How many were removed."""
        index = self._start()
        candidates = await index.expired(cutoff_ns, limit)
        if not candidates:
            return 0
        removed = await index.in_worker(lambda: self._remove_files(candidates, files))
        for task_id, stamp in removed:
            index.delete_if(task_id, stamp)
            self._forget(task_id)
            self.event_log.forget(task_id)
        index.wrote_folder()
        index.commit()
        return len(removed)

    def _remove_files(
        self, candidates: list[tuple[str, Stamp]], inbox_files: bool
    ) -> list[tuple[str, Stamp]]:
        """(on the maintenance thread) Unlink the task files still as indexed."""
        removed: list[tuple[str, Stamp]] = []
        for task_id, stamp in candidates:
            path = f"{self._dir}/{task_id}.json"
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                removed.append((task_id, stamp))  # gone already: only the row is left
                continue
            except OSError:
                continue
            if file_stamp(st) != stamp:
                continue  # written since it was indexed: the next pass decides
            if inbox_files:
                self._remove_inbox_files(task_id, path)
            self.event_log.remove_file(task_id)
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("could not remove expired task file %s: %s", path, exc)
                continue
            removed.append((task_id, stamp))
        return removed

    def _remove_inbox_files(self, task_id: str, path: str) -> None:
        raw = self._read_raw(path)
        if raw is None or raw[1] is None:
            return
        try:
            task, _, _ = decode_record(raw[1], task_id)
        except ValueError:
            return
        remove_inbox_files(self.workspace, task)
