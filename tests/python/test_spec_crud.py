"""MongoDB's CRUD spec tests (unified test format) against the real server.

The test files are read at run time from ../shared/spec-tests/crud/tests/unified
(never copied here: their licence is CC BY-NC-SA). One pytest test per
(file, test description). Tests the server cannot pass yet are listed, with
the reason, in spec_expected_failures.txt and run as non-strict xfail; the
terminal summary (conftest.py) counts results per file and names unexpected
passes.
"""

from pathlib import Path

import pytest

import unified

SPEC_DIR = unified.SPEC_ROOT / "crud" / "tests" / "unified"
EXPECTED_FAILURES_FILE = Path(__file__).with_name("spec_expected_failures.txt")

if not SPEC_DIR.is_dir():
    pytest.skip(f"CRUD spec tests not found at {SPEC_DIR} (see ../shared/spec-tests/README.md)",
                allow_module_level=True)

CASES = unified.collect(SPEC_DIR)
EXPECTED_FAILURES = unified.load_expected_failures(EXPECTED_FAILURES_FILE)


def _params():
    params = []
    for case in CASES:
        reason = EXPECTED_FAILURES.get(case.key)
        marks = [pytest.mark.xfail(reason=reason, strict=False)] if reason else []
        params.append(pytest.param(case, id=case.key, marks=marks))
    return params


@pytest.fixture(scope="module")
def internal_client(module_server):
    client = module_server.client(w="majority", socketTimeoutMS=unified.SOCKET_TIMEOUT_MS)
    yield client
    client.close()


@pytest.fixture(scope="module")
def server_info(internal_client):
    return unified.ServerInfo(internal_client)


@pytest.mark.parametrize("case", _params())
def test_crud_spec(case, module_server, internal_client, server_info, record_property):
    record_property("spec_summary", ("crud/tests/unified", case.file))
    data = unified.load_spec_file(case.path)
    runner = unified.Runner(data, data["tests"][case.index], module_server.uri, internal_client, server_info)
    reason = runner.skip_reason()
    if reason:
        pytest.skip(reason)
    runner.run()


def test_expected_failures_name_existing_tests():
    """Every line of spec_expected_failures.txt names a real test."""
    stale = sorted(set(EXPECTED_FAILURES) - {c.key for c in CASES})
    assert not stale, f"entries of {EXPECTED_FAILURES_FILE.name} that match no test: {stale}"
