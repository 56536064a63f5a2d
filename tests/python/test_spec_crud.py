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


@pytest.mark.parametrize("case", unified.pytest_params(CASES, EXPECTED_FAILURES))
def test_crud_spec(case, module_server, internal_client, server_info, record_property):
    record_property("spec_summary", ("crud/tests/unified", case.file))
    reason = unified.run_case(case, module_server.uri, internal_client, server_info)
    if reason:
        pytest.skip(reason)


def test_expected_failures_name_existing_tests():
    """Every line of spec_expected_failures.txt names a real test."""
    stale = sorted(set(EXPECTED_FAILURES) - {c.key for c in CASES})
    assert not stale, f"entries of {EXPECTED_FAILURES_FILE.name} that match no test: {stale}"
