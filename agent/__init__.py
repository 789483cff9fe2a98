"""What runs a turn: the :class:`Agent` interface an agent implements, the outputs it
yields, and the faux, process and assistant agents built on it.

    from a2a_gateway.agent import Agent, InputRequired, Output, TextChunk, Turn

The names below are the interface an agent is written against (README, "Host your own
agent"); the agents themselves are loaded by the hosts from their modules.
"""

from .base import (
    Agent,
    AgentError,
    AgentProfile,
    ArtifactChunk,
    AuthRequired,
    Completed,
    Ending,
    Failed,
    File,
    InputRequired,
    Output,
    Progress,
    Rejected,
    Signal,
    TextChunk,
    Turn,
)

__all__ = [
    "Agent",
    "AgentError",
    "AgentProfile",
    "ArtifactChunk",
    "AuthRequired",
    "Completed",
    "Ending",
    "Failed",
    "File",
    "InputRequired",
    "Output",
    "Progress",
    "Rejected",
    "Signal",
    "TextChunk",
    "Turn",
]
