"""Shared test helpers.

``require(condition, reason)`` skips a test locally when a real client or torch is missing, and
FAILS it when ``DDP_LINT_REQUIRE_ALL=1`` (set by .ci/run), so nothing is silently skipped in CI.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
REQUIRE_ALL = os.environ.get("DDP_LINT_REQUIRE_ALL") == "1"

sys.path.insert(0, str(ROOT))


def require(condition: bool, reason: str) -> None:
    if condition:
        return
    if REQUIRE_ALL:
        pytest.fail(f"required in CI but missing: {reason}", pytrace=False)
    pytest.skip(reason)


def require_torch() -> None:
    require(importlib.util.find_spec("torch") is not None, "torch is not installed")


def require_executable(name: str) -> str:
    path = shutil.which(name)
    require(path is not None, f"`{name}` is not on PATH")
    return path  # type: ignore[return-value]


# Hypothesis profiles for tests/fuzz (docs/reliability.md): "ci", the default, is derandomized
# (fixed seed) and bounded; `pytest --hypothesis-profile=long` digs much deeper (scaled by
# tests/fuzz/support.examples()).
try:
    from hypothesis import HealthCheck, settings as _hyp_settings

    _HYP_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
    _hyp_settings.register_profile("ci", derandomize=True, database=None, deadline=None, max_examples=50,
                                   print_blob=True, suppress_health_check=_HYP_SUPPRESS)
    _hyp_settings.register_profile("long", deadline=None, max_examples=1000, print_blob=True,
                                   suppress_health_check=_HYP_SUPPRESS)
    _hyp_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
except ImportError:  # pragma: no cover - hypothesis is in the test extra
    pass
