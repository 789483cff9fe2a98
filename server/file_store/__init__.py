"""The workspace task store: one JSON file per task, ``<workspace>/.a2a/tasks/<id>.json``.

File format (ProtoJSON for the protocol objects; edit it by hand if you like)::

    {"version": 1,
     "owner": {"name": "travel-bot", "workspace": "/srv/ws"},
     "task": {...Task...},
     "pushConfigs": [{...TaskPushNotificationConfig...}],
     "pushConfigVersions": {"<config id>": "0.3"},
     "retryKeys": [{"messageId": "...", "fingerprint": "..."}]}

The task is written on one line, as a send's answer prints it (its bytes are reused for
the answer); the rest of the document is indented.

``pushConfigVersions`` (only when there are any) names the configs registered over an
A2A version other than 1.0: their deliveries take that version's shape.

``retryKeys`` (only when there are any) are the messageId retry keys of the messages
that created or continued the task (``engine.retries``; their owner is the file's).
The index below is what lookups use; the file holds them too, because the file is
durable before the answer that names the task leaves while the index commits a few
milliseconds later: after a kill -9, the reconcile at the next start puts back the keys
of the files written after the index's last commit, and retry-key lookups wait for it
(:meth:`~.task_index.TaskIndex.lookup_message`), so a message answered just before the
kill and retried after the restart finds its task.

Push-config secrets (``token``, ``authentication.credentials``) are sealed with the
workspace's :class:`~.secret_box.SecretBox` on every write (``"enc:v1:..."``) and opened
on read, so records in memory hold plaintext and files never do. A plaintext value
(a hand-edited file) is read as is and sealed by the next write. A config whose secret
does not open (the key file was replaced or removed) is dropped from the record, with
a warning naming the config id and the file, never the value.

Writes are atomic: a new task file of at most a page (without fsync, Linux) is
created in place (``O_EXCL``) and written with one ``write``; a larger one, or with
fsync, is written whole to an unnamed file (``O_TMPFILE``) that is then linked in; a
replacement, or where the system cannot do that, goes to a temp file in the same folder
(``.<id>.<pid>.<n>.tmp``) renamed over the task file. A reader, or a process killed
with SIGKILL at any instant, sees the old file or the new one, never a half-written
one, with one exception that no answer depends on: a process killed between a new
file's creation and its write (one page lands whole or not at all) leaves it empty;
its task was never answered, an empty file reads as no such task, and the index's
reconcile removes it (on the event loop, where no write of this process is ever half
done). Stale temp files (another process id in their name) are removed by the index's
reconcile too, which runs at start after an unclean stop.

Reads are fresh: every load ``stat``s the file; a cache of recently read records, as
serialized protobuf bytes, bounded by a count and a byte budget (``cache_entries``,
``cache_bytes``), is used only while the file's (mtime, size, inode) stamp is
unchanged, so an edit or removal on disk applies to the next request. A malformed or
unreadable file (bad JSON, bad task, id not matching its name) reads as "no such task";
it is logged once per version of the file while it is cached, with its path only.

ListTasks and the messageId retry keys use the workspace's index on disk
(``.a2a/index.sqlite3``, see ``task_index``): every write updates its row in the same
step, and the index notices files changed behind the server's back (the folder's mtime
on each ListTasks, a periodic reconcile), and is rebuilt in the background when it is
missing or unreadable.

Measurements (this host: ext4 on a virtual disk, ~1 KiB records, one writer; the disk
alternates between slow and fast phases, hence the ranges):

- atomic write without fsync: 1,100-18,900 new files/s, 1,300-10,000 replacements/s;
- with fsync (the file before the rename, the folder after a new file): 900-2,900/s;
- in the engine, inline writes vs ``asyncio.to_thread``: 2,190-2,260 vs 2,020-2,150
  blocking sends/s on one pinned core (the bench pins the server to one core, where a
  thread cannot overlap the kernel's work and only adds hand-offs), so writes are
  inline. Creating the file is most of the cost; the engine writes a task once when its
  run ends without waiting (see ``engine``), not at every state.

fsync policy: ``fsync=False`` by default. A process crash (kill -9, OOM) loses nothing
that was written: the rename is atomic and the page cache belongs to the kernel. A
power cut or kernel crash may lose the last seconds of updates, and a file whose data
had not reached the disk may read as malformed, i.e. TaskNotFound, never as a crash.
``fsync=True`` (``serve --fsync``) makes every write durable before it returns. Its
writes (the file, its fsync, the link or rename, the folder's fsync) run on one writer
thread per store, so the event loop never waits on the disk; one thread, so they land
in the order they were asked for (a later save of a task always wins), and each index
row follows its file in that order, also when the save that asked was cancelled. A
save asked while the store closes joins that queue and lands before the close
returns; one asked after it raises, writing nothing.

The store is the set of its roles (``store_roles``), one module each over the
workspace's files (:class:`~.folder.TaskFiles`: the folder, index, record cache,
writer and the store's life): ``reads`` (load, read-ahead, listing), ``writes``
(save), ``retention`` (expire), ``retry_keys`` (the index's keys); the file format is
``task_file``; the roles of a store of one process come from ``..local_roles``.
:class:`WorkspaceTaskStores` (``workspaces``) routes each owner to its workspace's.
"""

from __future__ import annotations

from .folder import CACHE_BYTES, CACHE_ENTRIES, EVENTS_FOLDER, TASKS_FOLDER
from .reads import READ_AHEAD_FRESH_S, READ_THREADS
from .store import WorkspaceTaskStore
from .task_file import (
    FORMAT_VERSION,
    SAVED_AS_KEY,
    Decoded,
    decode_document,
    decode_record,
    encode_record,
    owner_from_document,
    remove_inbox_files,
)
from .workspaces import WorkspaceTaskStores

__all__ = [
    "CACHE_BYTES",
    "CACHE_ENTRIES",
    "EVENTS_FOLDER",
    "FORMAT_VERSION",
    "READ_AHEAD_FRESH_S",
    "READ_THREADS",
    "SAVED_AS_KEY",
    "TASKS_FOLDER",
    "Decoded",
    "WorkspaceTaskStore",
    "WorkspaceTaskStores",
    "decode_document",
    "decode_record",
    "encode_record",
    "owner_from_document",
    "remove_inbox_files",
]
