"""What several test modules share (a test module imports no other; tests/test_layout.py checks):
the kernel library under test and its contracts, the tiny pipeline, IR inputs, synthetic parity,
the review's in-process certification, and the stale-name guard. Fixtures defined here reach the
tests through tests/conftest.py's ``pytest_plugins``."""
