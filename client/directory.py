"""The cards of the agents in agents.json, fetched concurrently (10 s each, 16 at a
time), for the a2a tool's ``agents`` action and ``a2a-gateway agents list``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.local.redaction import Redactor
from a2a_gateway.protocol.errors import A2AError

from .agents_file import AgentEntry
from .guarded_http import open_agent

#: Seconds allowed for one agent's card (and extended card).
CARD_TIMEOUT_S = 10.0
#: Cards fetched at once: agents.json may list thousands of agents (up to 1 MiB).
CARD_FETCHES_AT_ONCE = 16
#: Examples shown per skill.
MAX_EXAMPLES = 3


@dataclass(frozen=True, slots=True)
class AgentCardResult:
    entry: AgentEntry
    card: pb.AgentCard | None
    problem: str | None = None  # why the card could not be fetched (no key in it)


async def fetch_agent_card(
    entry: AgentEntry,
    *,
    allow_private_urls: bool,
    timeout: float = CARD_TIMEOUT_S,  # noqa: ASYNC109
) -> AgentCardResult:
    """The card (extended when the key and card allow it) or why it is unreachable."""
    redact = Redactor([entry.key])
    try:
        async with asyncio.timeout(timeout):
            service = await open_agent(
                entry, allow_private_urls=allow_private_urls, timeout=timeout
            )
            await service.aclose()
    except TimeoutError:
        return AgentCardResult(entry, None, f"no answer within {timeout:g} s")
    except A2AError as exc:
        return AgentCardResult(entry, None, redact(exc.message))
    except (OSError, ValueError) as exc:
        return AgentCardResult(entry, None, redact(str(exc)) or type(exc).__name__)
    return AgentCardResult(entry, service.card)


async def fetch_agent_cards(
    entries: list[AgentEntry],
    *,
    allow_private_urls: bool,
    timeout: float = CARD_TIMEOUT_S,  # noqa: ASYNC109
) -> list[AgentCardResult]:
    """Every entry's card, in the entries' order, :data:`CARD_FETCHES_AT_ONCE` at a time."""
    gate = asyncio.Semaphore(CARD_FETCHES_AT_ONCE)

    async def fetch(entry: AgentEntry) -> AgentCardResult:
        async with gate:
            return await fetch_agent_card(
                entry, allow_private_urls=allow_private_urls, timeout=timeout
            )

    return list(await asyncio.gather(*(fetch(e) for e in entries)))


def one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe(result: AgentCardResult) -> str:
    """The tool's listing of one agent: several lines, or one with ``unreachable``;
    the card's texts pass the entry's redactor (an extended card is fetched with the key)."""
    entry = result.entry
    card = result.card
    if card is None:
        return f"- {entry.name}: unreachable ({one_line(result.problem or 'unknown reason')})"
    description = entry.description or card.description
    lines = [f"- {entry.name}: {one_line(description) or '(no description)'}"]
    caps = card.capabilities
    streaming = "yes" if caps.streaming else "no"
    push = "yes" if caps.push_notifications else "no"
    lines.append(f"  card name: {one_line(card.name)}; streaming: {streaming}; push: {push}")
    for skill in card.skills:
        text = f"  skill {one_line(skill.id, 80)}: {one_line(skill.name, 120)}"
        if skill.description:
            text += f" - {one_line(skill.description)}"
        lines.append(text)
        examples = [one_line(e, 200) for e in list(skill.examples)[:MAX_EXAMPLES]]
        if examples:
            lines.append("    examples: " + " | ".join(examples))
    return Redactor([entry.key])("\n".join(lines))
