"""Fill a local folder with the before and after trees of every case in the manifest.

    python -m bench.realbugs.fill --mirrors /work/.mirror --trees /tmp/realbugs

Each repository must be a local git directory with history: ``<mirrors>/<owner>+<name>/repo`` (what
the library's ``fetch`` brings) or ``<mirrors>/<owner>+<name>`` (a bare or normal clone). Only the
``.py`` files of the two commits are extracted (``<trees>/<id>/before`` and ``.../after``), so
cross-file analysis sees the whole package, and the project markers (``pyproject.toml``,
``setup.cfg``), so it finds the project's roots as in the repository (a tree filled before the
markers were extracted gets them on the next run). Nothing here is ever committed.
"""
from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tarfile
from pathlib import Path

from .manifest import load_manifest


def git_dir(mirrors: Path, repo: str) -> Path | None:
    base = mirrors / repo.replace("/", "+")
    for cand in (base / "repo", base / ".git", base):
        if (cand / "HEAD").is_file():
            return cand
    return None


SOURCES = ":(glob)**/*.py"
MARKERS = (":(glob)**/pyproject.toml", ":(glob)**/setup.cfg")


def extract(gd: Path, rev: str, dest: Path, markers_only: bool = False) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for pattern in (*(() if markers_only else (SOURCES,)), *MARKERS):
        got = subprocess.run(["git", f"--git-dir={gd}", "archive", "--format=tar", rev, "--", pattern],
                             capture_output=True)
        if got.returncode:
            if pattern in MARKERS and b"did not match" in got.stderr:
                continue  # a marker the commit does not have
            raise subprocess.CalledProcessError(got.returncode, got.args, got.stdout, got.stderr)
        with tarfile.open(fileobj=io.BytesIO(got.stdout)) as tf:
            members = [m for m in tf.getmembers() if m.isfile() and not m.name.startswith(("/", ".."))
                       and ".." not in Path(m.name).parts]
            tf.extractall(dest, members=members, filter="data")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mirrors", type=Path, default=Path("/work/.mirror"))
    ap.add_argument("--trees", type=Path, default=Path("/tmp/realbugs"))
    ap.add_argument("--only", nargs="*", help="case ids")
    a = ap.parse_args(argv)
    missing = 0
    for case in load_manifest():
        if a.only and case["id"] not in a.only:
            continue
        out = a.trees / case["id"]
        have = (out / "after").is_dir() and (out / "before").is_dir()
        if have and (out / ".markers").is_file():
            continue
        gd = git_dir(a.mirrors, case["repo"])
        if gd is None:
            print(f"{case['id']}: no local git directory for {case['repo']} under {a.mirrors}", file=sys.stderr)
            missing += 1
            continue
        try:
            extract(gd, case["parent"], out / "before", markers_only=have)
            extract(gd, case["commit"], out / "after", markers_only=have)
            (out / ".markers").write_text("project markers extracted\n")
        except subprocess.CalledProcessError as e:
            print(f"{case['id']}: git archive failed: {e.stderr.decode(errors='replace').strip()[:200]}",
                  file=sys.stderr)
            missing += 1
    print(f"trees in {a.trees}; {missing} case(s) missing", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
