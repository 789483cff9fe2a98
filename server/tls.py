"""TLS for both servers (``serve --tls-cert --tls-key [--tls-client-ca]``), and the
client certificate a caller presented.

With a client CA the HTTP server asks every client for a certificate and verifies the
one it gets against that CA (a certificate of another CA fails the handshake); a client
without one still connects, for key and token callers. gRPC's Python server can only
not ask, or ask and require: with a client CA, every gRPC client must present a
certificate of that CA (``require_client_auth``), the stricter of the two.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from aiohttp import web


@dataclass(frozen=True, slots=True)
class TlsConfig:
    cert: Path  # PEM: the server's certificate chain
    key: Path  # PEM: its private key
    client_ca: Path | None = None  # PEM: the CA that signs callers' client certificates


def server_ssl_context(tls: TlsConfig) -> ssl.SSLContext:
    """The HTTP server's context (TLS 1.2 or newer)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(tls.cert, tls.key)
    if tls.client_ca is not None:
        context.load_verify_locations(cafile=tls.client_ca)
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


def grpc_server_credentials(tls: TlsConfig) -> grpc.ServerCredentials:
    root = tls.client_ca.read_bytes() if tls.client_ca is not None else None
    return grpc.ssl_server_credentials(
        [(tls.key.read_bytes(), tls.cert.read_bytes())],
        root_certificates=root,
        require_client_auth=root is not None,
    )


def http_peer_certificate(request: web.Request) -> bytes | None:
    """The DER of the client certificate the TLS handshake verified, if any."""
    transport = request.transport
    if transport is None:
        return None
    ssl_object: Any = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    return bytes(der) if der else None


def grpc_peer_certificate(context: grpc.aio.ServicerContext[Any, Any]) -> bytes | None:
    """The DER of the client certificate gRPC verified, if any."""
    pems = list(context.auth_context().get("x509_pem_cert", ()))
    if not pems:
        return None
    return ssl.PEM_cert_to_DER_cert(pems[0].decode("ascii"))


__all__ = [
    "TlsConfig",
    "grpc_peer_certificate",
    "grpc_server_credentials",
    "http_peer_certificate",
    "server_ssl_context",
]
