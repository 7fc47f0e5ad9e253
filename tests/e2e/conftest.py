"""Fixtures for the ankusa end-to-end suite; the helpers live in helpers.py."""
import os

import pytest

from helpers import BIN, SANITIZER_MARKERS, Server
from receiver import Receiver


@pytest.fixture(scope="session", autouse=True)
def _binary_present():
    if not os.access(BIN, os.X_OK):
        pytest.fail(f"ankusa binary not found at {BIN}: run `make test-build` (or set ANKUSA_BIN)",
                    pytrace=False)


@pytest.fixture
def ankusa(request, tmp_path):
    """Factory: ankusa(config={...overrides}, env={...}, start=True, name=...) -> Server.
    Every server is stopped by PID when the test ends; a sanitizer report or an unclean
    SIGTERM exit fails the test's teardown."""
    servers = []
    request.node._ankusa_servers = servers

    def factory(config=None, env=None, start=True, name=None, **kw):
        name = name or f"node{len(servers)}"
        s = Server(tmp_path / name, name=name, config=config, env=env, **kw)
        servers.append(s)
        if start:
            s.start()
        return s

    yield factory

    problems = []
    for s in servers:
        was_running = s.running()
        rc = s.stop()
        if was_running and rc != 0:
            problems.append(f"{s.name}: exit code {rc!r} after SIGTERM (expected 0)\n{s.log_tail(40)}")
        text = s.log_text()
        if any(m in text for m in SANITIZER_MARKERS):
            problems.append(f"{s.name}: sanitizer report in stderr\n{s.log_tail(120)}")
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


@pytest.fixture
def rx():
    """A receiver (receiver.Receiver) that answers 204 to every delivery; closed after the test."""
    r = Receiver()
    yield r
    r.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        for s in getattr(item, "_ankusa_servers", []):
            rep.sections.append((f"ankusa stderr: {s.name} (pid {s.pid})", s.log_tail(80)))

