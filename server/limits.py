"""Limits: request rates (token buckets per caller and per client address) and per-caller
caps on concurrently running tasks and open contexts.

Two independent pieces, both answering :class:`RateLimitedError` (HTTP 429 with
``Retry-After``, gRPC ``RESOURCE_EXHAUSTED``) when a limit is reached:

- :class:`RequestLimiter` is consulted by the bindings on every request: the client
  address first (before authentication, so guessing keys is throttled too), then the
  authenticated caller. A bucket holds up to ``per_minute`` requests and refills at
  ``per_minute / 60`` per second, so a quiet client may burst a whole minute's worth.
- :class:`TaskLimiter` is consulted by the task engine when a run starts. A context is
  *open* from the first run started in it until its task ends in a terminal state, or
  until ``context_idle_s`` pass without activity while it waits for input (an
  input-required task nobody answers does not hold a slot forever).

The anonymous caller (``--allow-anonymous`` on loopback: everyone without a key) is
not one caller but many: it gets the per-address limit only, no per-caller rate or caps.
Zero means unlimited everywhere. Per-caller values from ``callers.json``
(:class:`CallerLimits`) override the server-wide defaults. All state is in memory and
bounded: idle buckets are forgotten (a forgotten bucket is a full one, so nothing is
lost), and contexts are dropped when they close or expire.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from a2a_gateway.protocol.context import ANONYMOUS, Caller
from a2a_gateway.protocol.errors import RateLimitedError

Clock = Callable[[], float]

SECONDS_PER_MINUTE = 60.0
#: Buckets remembered at most; beyond this, full (idle) buckets are dropped first.
MAX_BUCKETS = 100_000
#: Retry-After when the running-task cap is reached (we cannot know when a run ends).
RUNNING_RETRY_AFTER_S = 5


def _check_non_negative(owner: object, **values: float) -> None:
    for name, value in values.items():
        if value < 0:
            raise ValueError(f"{type(owner).__name__}.{name} must not be negative")


@dataclass(frozen=True, slots=True)
class RateLimits:
    """Server-wide request rates; 0 = unlimited."""

    per_caller_per_minute: int = 0
    per_ip_per_minute: int = 0

    def __post_init__(self) -> None:
        _check_non_negative(
            self,
            per_caller_per_minute=self.per_caller_per_minute,
            per_ip_per_minute=self.per_ip_per_minute,
        )


@dataclass(frozen=True, slots=True)
class TaskCaps:
    """Server-wide per-caller caps; 0 = unlimited."""

    max_running_tasks: int = 64
    max_open_contexts: int = 256
    context_idle_s: float = 1800.0  # the seed's SessionIdleTimeout

    def __post_init__(self) -> None:
        _check_non_negative(
            self,
            max_running_tasks=self.max_running_tasks,
            max_open_contexts=self.max_open_contexts,
            context_idle_s=self.context_idle_s,
        )


@dataclass(frozen=True, slots=True)
class CallerLimits:
    """One caller's overrides from ``callers.json``; None = the server default, 0 = none."""

    rate_limit_per_minute: int | None = None
    max_running_tasks: int | None = None
    max_open_contexts: int | None = None


NO_OVERRIDES = CallerLimits()

#: How the task limiter learns a caller's overrides (the authenticator provides it).
LimitsFor = Callable[[Caller], CallerLimits]


def caller_key(caller: Caller) -> str:
    # Caller names never contain NUL, so (workspace, name) pairs cannot collide.
    return f"{caller.workspace}\x00{caller.name}"


def address_key(address: str) -> str:
    """The bucket key of a client address: IPv4 as is, IPv6 by its /64 (one host
    usually owns a whole /64), IPv4-mapped IPv6 as the IPv4 address."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


# --- request rates ---------------------------------------------------------------------


class _Bucket:
    __slots__ = ("per_minute", "stamp", "tokens")

    def __init__(self, per_minute: int, now: float) -> None:
        self.per_minute = per_minute
        self.tokens = float(per_minute)
        self.stamp = now

    def refill(self, now: float) -> None:
        elapsed = max(0.0, now - self.stamp)
        self.tokens = min(
            float(self.per_minute), self.tokens + elapsed * self.per_minute / SECONDS_PER_MINUTE
        )
        self.stamp = now


class TokenBuckets:
    """Token buckets by key, each with its own per-minute rate (it may change per call,
    e.g. after a ``callers.json`` edit; the bucket then keeps what it had, capped)."""

    def __init__(self, *, clock: Clock = time.monotonic, max_keys: int = MAX_BUCKETS) -> None:
        self._clock = clock
        self._max_keys = max_keys
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, key: str, per_minute: int) -> float:
        """Take one token: 0.0 when granted, else the seconds until one is available."""
        if per_minute <= 0:
            return 0.0
        now = self._clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self._max_keys:
                self._prune(now)  # before adding: the new (full) bucket must stay
            bucket = _Bucket(per_minute, now)
            self._buckets[key] = bucket
        else:
            self._buckets.move_to_end(key)
            bucket.refill(now)
            if bucket.per_minute != per_minute:
                bucket.per_minute = per_minute
                bucket.tokens = min(bucket.tokens, float(per_minute))
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) * SECONDS_PER_MINUTE / per_minute

    def _prune(self, now: float) -> None:
        # Full buckets carry no information: drop those first, then the least recent.
        # Down to 90% so that a flood of new keys does not scan the table every time.
        for key in [k for k, b in self._buckets.items() if _is_full(b, now)]:
            del self._buckets[key]
        while len(self._buckets) > self._max_keys * 9 // 10:
            self._buckets.popitem(last=False)


def _is_full(bucket: _Bucket, now: float) -> bool:
    bucket.refill(now)
    return bucket.tokens >= bucket.per_minute


def _retry_after(wait_s: float) -> int:
    return max(1, math.ceil(wait_s))


def _rate_limited(what: str, wait_s: float, limit: str) -> RateLimitedError:
    """The error for a request rate reached: ``what``, and when to retry."""
    retry = _retry_after(wait_s)
    return RateLimitedError(
        f"{what}; retry in {retry} s", retry_after_s=retry, metadata={"limit": limit}
    )


class RequestLimiter:
    """Per-request rate limits shared by every binding of one server."""

    def __init__(
        self,
        limits: RateLimits | None = None,
        *,
        clock: Clock = time.monotonic,
        max_keys: int = MAX_BUCKETS,
    ) -> None:
        self.limits = limits or RateLimits()
        self._callers = TokenBuckets(clock=clock, max_keys=max_keys)
        self._addresses = TokenBuckets(clock=clock, max_keys=max_keys)

    @property
    def limits_addresses(self) -> bool:
        """Whether :meth:`check_address` counts anything: a binding that must work to
        learn the client's address (gRPC's peer string) skips that when it does not."""
        return self.limits.per_ip_per_minute > 0

    def check_address(self, address: str | None) -> None:
        """Count one request from ``address`` (None: not an IP connection, not limited)."""
        if address is None or self.limits.per_ip_per_minute <= 0:
            return
        wait = self._addresses.take(address_key(address), self.limits.per_ip_per_minute)
        if wait:
            raise _rate_limited("Too many requests from this address", wait, "address")

    def check_caller(self, caller: Caller, limits: CallerLimits = NO_OVERRIDES) -> None:
        """Count one request by ``caller`` (its own rate when ``callers.json`` sets one)."""
        if caller is ANONYMOUS or caller == ANONYMOUS:  # (the identity test: most calls)
            return
        per_minute = limits.rate_limit_per_minute
        if per_minute is None:
            per_minute = self.limits.per_caller_per_minute
        if per_minute <= 0:
            return
        wait = self._callers.take(caller_key(caller), per_minute)
        if wait:
            raise _rate_limited(f"Too many requests from caller {caller.name!r}", wait, "caller")


# --- running tasks and open contexts ----------------------------------------------------


class _Context:
    __slots__ = ("last", "runs")

    def __init__(self, now: float) -> None:
        self.runs = 0
        self.last = now


class _CallerState:
    __slots__ = ("contexts", "running")

    def __init__(self) -> None:
        self.running = 0
        self.contexts: dict[str, _Context] = {}


class RunSlot:
    """One admitted run. :meth:`finish` gives the slot back (idempotent)."""

    __slots__ = ("_caller", "_context_id", "_done", "_limiter")

    def __init__(
        self, limiter: TaskLimiter, caller: Caller, context_id: str, *, counted: bool = True
    ) -> None:
        self._limiter = limiter
        self._caller = caller
        self._context_id = context_id
        self._done = not counted

    def finish(self, *, keep_context_open: bool) -> None:
        """The run ended; ``keep_context_open`` when its task now waits for input."""
        if self._done:
            return
        self._done = True
        self._limiter._finished(self._caller, self._context_id, keep_context_open)


class TaskLimiter:
    """Per-caller caps on running tasks and open contexts (see the module docstring).

    The engine calls :meth:`start` before it runs the agent for a message (new task,
    continuation, or a plain message reply), keeps the :class:`RunSlot` with the run,
    and calls ``slot.finish(keep_context_open=<task is input/auth-required>)`` when the
    run ends however it ends. When a waiting task ends without a run (CancelTask on an
    input-required task), it calls :meth:`close_context`.
    """

    def __init__(
        self,
        caps: TaskCaps | None = None,
        *,
        limits_for: LimitsFor | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.caps = caps or TaskCaps()
        self._limits_for = limits_for
        self._clock = clock
        self._callers: dict[str, _CallerState] = {}

    def start(self, caller: Caller, context_id: str) -> RunSlot:
        """Admit a run of ``caller`` in ``context_id`` or raise RateLimitedError."""
        if caller == ANONYMOUS:
            return RunSlot(self, caller, context_id, counted=False)
        now = self._clock()
        limits = self._limits_for(caller) if self._limits_for is not None else NO_OVERRIDES
        max_running = _pick(limits.max_running_tasks, self.caps.max_running_tasks)
        max_contexts = _pick(limits.max_open_contexts, self.caps.max_open_contexts)
        key = caller_key(caller)
        state = self._callers.get(key) or _CallerState()
        self._expire(state, now)
        if max_running and state.running >= max_running:
            raise RateLimitedError(
                f"Caller {caller.name!r} already has {state.running} running tasks "
                f"(the limit is {max_running}); retry when one ends",
                retry_after_s=RUNNING_RETRY_AFTER_S,
                metadata={"limit": "runningTasks"},
            )
        context = state.contexts.get(context_id)
        if context is None:
            if max_contexts and len(state.contexts) >= max_contexts:
                raise RateLimitedError(
                    f"Caller {caller.name!r} already has {len(state.contexts)} open contexts "
                    f"(the limit is {max_contexts}); finish or cancel a task first",
                    retry_after_s=self._next_expiry(state, now),
                    metadata={"limit": "openContexts"},
                )
            context = state.contexts[context_id] = _Context(now)
        context.runs += 1
        context.last = now
        state.running += 1
        self._callers[key] = state
        return RunSlot(self, caller, context_id)

    def close_context(self, caller: Caller, context_id: str) -> None:
        """A waiting context ended without a run (its task was canceled)."""
        key = caller_key(caller)
        state = self._callers.get(key)
        if state is None:
            return
        context = state.contexts.get(context_id)
        if context is not None and context.runs == 0:
            del state.contexts[context_id]
        self._forget_if_idle(key, state)

    def running(self, caller: Caller) -> int:
        state = self._callers.get(caller_key(caller))
        return state.running if state is not None else 0

    def open_contexts(self, caller: Caller) -> int:
        state = self._callers.get(caller_key(caller))
        if state is None:
            return 0
        self._expire(state, self._clock())
        return len(state.contexts)

    def _finished(self, caller: Caller, context_id: str, keep_open: bool) -> None:
        key = caller_key(caller)
        state = self._callers.get(key)
        if state is None:
            return
        state.running = max(0, state.running - 1)
        context = state.contexts.get(context_id)
        if context is not None:
            context.runs = max(0, context.runs - 1)
            context.last = self._clock()
            if context.runs == 0 and not keep_open:
                del state.contexts[context_id]
        self._forget_if_idle(key, state)

    def _expire(self, state: _CallerState, now: float) -> None:
        idle = self.caps.context_idle_s
        if not idle:
            return
        stale = [cid for cid, c in state.contexts.items() if c.runs == 0 and now - c.last >= idle]
        for cid in stale:
            del state.contexts[cid]

    def _next_expiry(self, state: _CallerState, now: float) -> int:
        """Seconds until the first waiting context expires (an idle window if none)."""
        idle = self.caps.context_idle_s or SECONDS_PER_MINUTE
        waits = [c.last + idle - now for c in state.contexts.values() if c.runs == 0]
        return _retry_after(min(waits) if waits else idle)

    def _forget_if_idle(self, key: str, state: _CallerState) -> None:
        if state.running == 0 and not state.contexts:
            self._callers.pop(key, None)


def _pick(override: int | None, default: int) -> int:
    return default if override is None else override


__all__ = [
    "NO_OVERRIDES",
    "CallerLimits",
    "LimitsFor",
    "RateLimits",
    "RequestLimiter",
    "RunSlot",
    "TaskCaps",
    "TaskLimiter",
    "TokenBuckets",
    "address_key",
    "caller_key",
]
