"""Shared pieces of tests/e2e/test_brokers.py: the one rabbitmq-server of the session.

rabbitmq-server takes seconds to boot and ~125 MB, so the suite runs one per session: the
session-scoped `broker` fixture of test_sink_rabbitmq.py. A fixture is registered per module
that defines (or imports) it, so importing that fixture here would start a second broker
whenever both files run in one session. session_rabbitmq() instead runs *that* fixture
definition (pytest caches its value for the session, and test_sink_rabbitmq.py's own tests
then get the same broker); only when test_sink_rabbitmq.py is not part of the session does
it start a broker of its own, the same way (RabbitServer().start(), stopped at the end)."""
import pytest

from rabbitmq_server import RabbitServer, available


def _rabbit_fixturedef(request):
    fm = request._fixturemanager
    for fd in fm._arg2fixturedefs.get("broker", ()):
        if fd.scope == "session" and str(fd.baseid).replace("\\", "/").endswith("test_sink_rabbitmq.py"):
            return fd
    return None


def session_rabbitmq(request):
    """The session's RabbitServer (see the module docstring). request: the SubRequest of a
    session-scoped fixture."""
    fd = _rabbit_fixturedef(request)
    if fd is not None:
        srv = fd.execute(request)  # cached by pytest: one value for the whole session
        request.addfinalizer(lambda: fd.finish(request))  # finish() is idempotent
        return srv
    why = available()
    if why:
        pytest.fail(f"cannot start rabbitmq-server: {why}", pytrace=False)
    srv = RabbitServer().start()
    request.addfinalizer(srv.stop)
    return srv
