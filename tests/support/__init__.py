"""The suite's helpers, in one place (tests import them from here, never from a test file
or a ``conftest.py``):

- :mod:`.workspace`: a workspace folder and its ``callers.json`` (the ``workspace`` and
  ``callers`` fixtures, :func:`~.workspace.write_callers`);
- :mod:`.ports`: free TCP ports on 127.0.0.1;
- :mod:`.processes`: server subprocesses (our gateway: ``GATEWAY``, ``gateway_command``,
  ``run_gateway`` for a run to its end, ``proxy_running`` for proxy mode; the official
  SDK's peers) and the SDK client as a driver;
- :mod:`.grpc_serving`: our gRPC server in process, with a channel to it;
- :mod:`.echo`: the one deterministic ``A2AService`` of the binding tests
  (``EchoService``, stateful or ``stateless``) and its flooding and holding variants;
- :mod:`.secrets`: secrets a test uses that the suite's log scan must look for;
- :mod:`.clocks`: injectable clocks;
- :mod:`.postgres`, :mod:`.certs`, :mod:`.idp`, :mod:`.otlp_receiver`: the session's
  PostgreSQL, a test CA, an OIDC identity provider and an OTLP receiver.

The fixtures of :mod:`.fixtures` are registered for the whole suite by
``tests/conftest.py``; ``tests/test_suite_layout.py`` checks that no test file defines a
fixture of its own under their names.
"""
