"""MongoDB's transactions and sessions spec tests (unified test format)
against the real server, through the runner of test_spec_crud.py.

Read at run time from ../shared/spec-tests/{transactions/tests/unified,
sessions/tests} (never copied here: CC BY-NC-SA). Tests for sharded or
load-balanced topologies skip through their runOnRequirements; tests the
server cannot pass yet are listed with their reason in
spec_expected_failures_transactions.txt and run as non-strict xfail.
"""

from pathlib import Path

import pytest

import unified

SPEC_DIRS = [unified.SPEC_ROOT / "transactions" / "tests" / "unified", unified.SPEC_ROOT / "sessions" / "tests"]
EXPECTED_FAILURES_FILE = Path(__file__).with_name("spec_expected_failures_transactions.txt")

if not all(d.is_dir() for d in SPEC_DIRS):
    pytest.skip(f"transactions/sessions spec tests not found under {unified.SPEC_ROOT} "
                "(see ../shared/spec-tests/README.md)", allow_module_level=True)

CASES = [case for d in SPEC_DIRS for case in unified.collect(d)]
# A folder that holds no test is a wrong path, not a suite that passed.
assert all(unified.collect(d) for d in SPEC_DIRS), f"a spec folder without tests: {SPEC_DIRS}"
EXPECTED_FAILURES = unified.load_expected_failures(EXPECTED_FAILURES_FILE)


@pytest.mark.parametrize("case", unified.pytest_params(CASES, EXPECTED_FAILURES))
def test_transactions_spec(case, module_server, internal_client, server_info, record_property):
    suite = "sessions" if "sessions" in case.path.parts else "transactions"
    record_property("spec_summary", (suite, case.file))
    reason = unified.run_case(case, module_server.uri, internal_client, server_info)
    if reason:
        pytest.skip(reason)


def test_expected_failures_name_existing_tests():
    """Every line of the expected-failures file names a real test."""
    stale = sorted(set(EXPECTED_FAILURES) - {c.key for c in CASES})
    assert not stale, f"entries of {EXPECTED_FAILURES_FILE.name} that match no test: {stale}"
