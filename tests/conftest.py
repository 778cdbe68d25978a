"""Shared test helpers.

``require(condition, reason)`` skips a test locally when a real client or torch is missing, and
FAILS it when ``DDP_LINT_REQUIRE_ALL=1`` (set by .ci/run), so nothing is silently skipped in CI.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

# tests/fixtures holds the rules' example files (data read by the tests), never test modules: a
# fixture named like one (``*_test.py``) must not be imported by the collection
collect_ignore_glob = ["fixtures/*"]

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


@contextlib.contextmanager
def exclusive(name: str):
    """Hold a lock shared by every pytest-xdist worker (and every test run of this user) while a
    fixture sets up something in the checkout that two processes must not build at once (`npm ci`,
    the bundled Python dependencies). The lock file is opened without following a symlink."""
    import fcntl
    import tempfile

    path = os.path.join(tempfile.gettempdir(), f"ddp-lint-tests-{name}-{os.getuid()}.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def time_scale() -> float:
    """How much slower than an idle machine this one runs now: the 1-minute load average per core
    (at least 1), times ``DDP_LINT_TEST_TIME_SCALE`` (default 1). Every deadline in a test goes
    through ``scaled`` so that a loaded CI machine (or ``pytest -n auto`` on 2 cores) waits longer
    instead of failing; a test that waits on an event returns as soon as it happens anyway."""
    try:
        factor = float(os.environ.get("DDP_LINT_TEST_TIME_SCALE") or 1)
    except ValueError:
        factor = 1.0
    try:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
    except (OSError, AttributeError):  # pragma: no cover - no load average (Windows)
        load = 1.0
    return max(factor, 0.1) * max(1.0, load)


def scaled(seconds: float) -> float:
    """A test deadline of ``seconds`` on an idle machine, scaled by ``time_scale()``."""
    return seconds * time_scale()


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


# -- the long tests ------------------------------------------------------------------------------
# Real editor clients, packaging (build, venv, pip, pre-commit) and end-to-end multi-node runs take
# minutes each. They are marked here by path (and by their own `pytestmark`) and left out of a plain
# `python -m pytest`, so that the README's command stays short; `--long`, or DDP_LINT_REQUIRE_ALL=1
# (set by `bash .ci/run`), runs them too. The run's summary line says how many were left out.
LONG_MARKS = ("client", "packaging", "e2e")
_LONG_PATHS = {
    "tests/clients/": ("client", "e2e"),
    "tests/test_vscode_e2e.py": ("client", "e2e"),
    "tests/test_packaging.py": ("packaging",),
    "tests/test_pre_commit.py": ("packaging",),
    "tests/runtime/test_multinode.py": ("e2e",),
}


def pytest_addoption(parser):
    parser.addoption("--long", action="store_true", default=False,
                     help="also run the long tests (marked client, packaging or e2e); "
                          "DDP_LINT_REQUIRE_ALL=1 implies it")


def run_long(config) -> bool:
    return bool(config.getoption("--long")) or REQUIRE_ALL


def pytest_itemcollected(item):
    """The long tests' marks, by path, as each item is collected."""
    try:
        rel = Path(str(item.fspath)).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return
    for prefix, marks in _LONG_PATHS.items():
        if rel.startswith(prefix):
            for m in marks:
                item.add_marker(m)


def pytest_collection_modifyitems(config, items):
    keep, left = [], []
    for item in items:
        if not run_long(config) and any(item.get_closest_marker(m) for m in LONG_MARKS):
            left.append(item)
        else:
            keep.append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = keep
        config._ddp_long_left = len(left)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if run_long(config):
        return
    n = getattr(config, "_ddp_long_left", 0)  # counted here without xdist; its workers count their own
    what = f"{n} long test{'s' if n != 1 else ''}" if n else "the long tests"
    terminalreporter.write_line(f"{what} (client, packaging, e2e) not run: `python -m pytest --long` "
                                "or `bash .ci/run` runs them")
