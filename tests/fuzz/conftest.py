"""Fuzz-suite plumbing. The Hypothesis profiles themselves are registered in tests/conftest.py (they
must exist before pytest loads `--hypothesis-profile`); here the "long" profile lifts the per-test
timeout, since thousands of examples per test are the point of it."""
from __future__ import annotations

import pytest
from hypothesis import settings


def pytest_collection_modifyitems(config, items):
    if settings.get_current_profile_name() == "ci":
        return
    for item in items:
        if item.get_closest_marker("hypothesis") is not None or "fuzz" in item.nodeid:
            item.add_marker(pytest.mark.timeout(0))
