"""A raw HTTP/2 client (the ``h2`` package) for sending gRPC frames no gRPC library would:
a length prefix larger than the data, a DATA frame shorter than the 5-byte prefix,
HEADERS that end the stream with no message. Asyncio, so it shares the test's loop with
the grpc.aio server under test."""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import h2.exceptions


def grpc_frame(message: bytes) -> bytes:
    """One length-prefixed gRPC message (not compressed)."""
    return b"\x00" + struct.pack(">I", len(message)) + message


@dataclass
class Outcome:
    """What the server sent on one stream."""

    headers: dict[str, str] = field(default_factory=dict)
    trailers: dict[str, str] = field(default_factory=dict)
    data: bytes = b""
    ended: bool = False
    reset: int | None = None  # the RST_STREAM error code, when the server reset it

    @property
    def grpc_status(self) -> int | None:
        value = self.trailers.get("grpc-status") or self.headers.get("grpc-status")
        return int(value) if value is not None else None

    @property
    def grpc_message(self) -> str:
        return self.trailers.get("grpc-message") or self.headers.get("grpc-message") or ""


class RawH2:
    """One HTTP/2 connection; streams are opened with :meth:`request`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.conn = h2.connection.H2Connection(config=config)
        self.outcomes: dict[int, Outcome] = {}
        self._changed = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None

    @classmethod
    async def connect(cls, port: int) -> RawH2:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        raw = cls(reader, writer)
        raw.conn.initiate_connection()
        raw._flush()
        raw._pump = asyncio.get_running_loop().create_task(raw._read())
        return raw

    def _flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self._writer.write(data)

    async def _read(self) -> None:
        while True:
            data = await self._reader.read(65536)
            if not data:
                for outcome in self.outcomes.values():
                    outcome.ended = True
                self._changed.set()
                return
            try:
                events = self.conn.receive_data(data)
            except h2.exceptions.ProtocolError:  # the server closed the connection
                events = []
            for event in events:
                self._handle(event)
            self._flush()
            self._changed.set()

    def _handle(self, event: h2.events.Event) -> None:
        stream_id = getattr(event, "stream_id", None)
        if stream_id is None or stream_id not in self.outcomes:
            return
        outcome = self.outcomes[stream_id]
        if isinstance(event, h2.events.ResponseReceived):
            outcome.headers = _decode(event.headers)
        elif isinstance(event, h2.events.TrailersReceived):
            outcome.trailers = _decode(event.headers)
        elif isinstance(event, h2.events.DataReceived):
            outcome.data += event.data
            self.conn.acknowledge_received_data(event.flow_controlled_length, stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            outcome.ended = True
        elif isinstance(event, h2.events.StreamReset):
            outcome.ended = True
            outcome.reset = int(event.error_code)

    def request(
        self,
        path: str,
        *,
        metadata: tuple[tuple[str, str], ...] = (),
        end_stream: bool = False,
    ) -> int:
        """Open a gRPC stream for ``path`` (``/package.Service/Method``), no deadline."""
        stream_id = self.conn.get_next_available_stream_id()
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", "127.0.0.1"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            *metadata,
        ]
        self.outcomes[stream_id] = Outcome()
        self.conn.send_headers(stream_id, headers, end_stream=end_stream)
        self._flush()
        return stream_id

    def send(self, stream_id: int, data: bytes, *, end_stream: bool = False) -> None:
        self.conn.send_data(stream_id, data, end_stream=end_stream)
        self._flush()

    async def finished(self, stream_id: int, bound: float) -> Outcome:
        """The stream's outcome once the server ended it (TimeoutError if not in time)."""
        outcome = self.outcomes[stream_id]
        async with asyncio.timeout(bound):
            while not outcome.ended:
                self._changed.clear()
                await self._changed.wait()
        return outcome

    async def close(self) -> None:
        if self._pump is not None:
            self._pump.cancel()
            await asyncio.gather(self._pump, return_exceptions=True)
        self._writer.close()


def _decode(headers: list[tuple[str, str]]) -> dict[str, str]:
    return {str(name): str(value) for name, value in headers}
