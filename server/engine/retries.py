"""What makes a SendMessage a retry: the rule the retry index is keyed by.

A client that lost an answer sends the same message again, messageId included, and
must get the task the first attempt created instead of a second run. But a messageId
alone is not proof: clients reuse ids (load generators across runs, bugs), and a
different message under a reused id must be taken as the new message it is, with its
own taskId, contextId and inline push config, never answered with another task. So a
retry is the same message: the same caller, the same messageId, and the same taskId,
contextId and parts (metadata, extensions and configuration may differ: a proxy adds
hop counts, a client may change its options on retry).

:func:`retry_key` is that rule as one hashable key; an index maps it to the task the
first attempt created. Two messages are the same retry exactly when their keys are
equal, so the index needs no other comparison (a persistent index stores the four
members as columns).
"""

from __future__ import annotations

import hashlib

from a2a_gateway.protocol.context import Caller
from lf.a2a.v1 import a2a_pb2 as pb

#: (caller workspace, caller name, messageId, fingerprint of taskId, contextId and parts)
RetryKey = tuple[str, str, str, str]


def retry_key(caller: Caller, message: pb.Message) -> RetryKey:
    """The key under which ``message`` from ``caller`` is remembered and looked up."""
    return (caller.workspace, caller.name, message.message_id, message_fingerprint(message))


def message_fingerprint(message: pb.Message) -> str:
    """A digest of what a retry must repeat: taskId, contextId and every part (its
    deterministic binary form: content, filename, media type and metadata), each
    preceded by its length. Hashed as one buffer (the same digest as one ``update`` per
    piece, at about half the cost: the retried send computes it on every call)."""
    task_id = message.task_id.encode()
    context_id = message.context_id.encode()
    chunks = [len(task_id).to_bytes(8, "big"), task_id, len(context_id).to_bytes(8, "big")]
    chunks.append(context_id)
    for part in message.parts:
        data = part.SerializeToString(deterministic=True)
        chunks += (len(data).to_bytes(8, "big"), data)
    return hashlib.blake2b(b"".join(chunks), digest_size=16).hexdigest()
