"""The ranks get the user's environment, not ddp-lint's own additions (no torch needed)."""
import json
import os

from ddp_lint.analysis.runtime.launcher import user_env


def test_bundled_libraries_are_not_on_the_scripts_path(tmp_path):
    bundled = str(tmp_path / "ext" / "bundled" / "libs")
    env = user_env({"PYTHONPATH": os.pathsep.join(["/home/me/src", bundled, str(tmp_path / "ext")]),
                    "DDP_LINT_BUNDLE_PATHS": json.dumps([bundled, str(tmp_path / "ext")]), "HOME": "/home/me"})
    assert env["PYTHONPATH"] == "/home/me/src"
    assert "DDP_LINT_BUNDLE_PATHS" not in env and env["HOME"] == "/home/me"


def test_only_bundled_paths_means_no_pythonpath(tmp_path):
    env = user_env({"PYTHONPATH": "/ext/libs", "DDP_LINT_BUNDLE_PATHS": '["/ext/libs"]'})
    assert "PYTHONPATH" not in env


def test_user_pythonpath_untouched_without_marker():
    assert user_env({"PYTHONPATH": "/a:/b"})["PYTHONPATH"] == "/a:/b"
    assert user_env({"PYTHONPATH": "/a", "DDP_LINT_BUNDLE_PATHS": "not json"})["PYTHONPATH"] == "/a"
