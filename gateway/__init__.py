"""a2a-gateway: an A2A 1.0 gateway (server, client, and hosts) in one package."""

__version__ = "0.1.0"
