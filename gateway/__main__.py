"""``python -m a2a_gateway`` is the ``a2a-gateway`` command."""

from a2a_gateway.cli import main

raise SystemExit(main())
