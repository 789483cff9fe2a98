"""Process-wide gRPC settings, applied before ``grpc`` is first imported (cli.py imports
this module first).

gRPC's C core installs fork handlers that log "Other threads are currently calling into
gRPC, skipping fork() handlers" on every fork, i.e. on every ``serve --exec`` turn. No
child process of ours uses gRPC, so fork support is off unless the environment says
otherwise.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
