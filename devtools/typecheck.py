"""Strict mypy over everything the project writes, one program at a time.

mypy checks a program whose module names are unique, and ours repeat a few on purpose:
the app's ``function_app.py`` and those of the local host's test and benchmark apps
(each one a Functions app of its own), and each tool's ``tests/conftest.py`` (pytest
reads each tool's tests as a folder of its own). So the code is checked as the programs
it runs as: the app's package with the tools' sources and the benchmarks, the app's
triggers, the app's tests, each tool's tests, and each test app. ``make lint`` and the
pre-commit hook both run this module, so the two cannot check different things.

``python -m devtools.typecheck`` runs every program (all of them, then fails if one
failed); ``--list`` prints them, one per line.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

# A test app of the local host: a folder ``*_app`` under a tool's tests/, with a
# function_app.py of its own. Checked alone, so left out of its tool's tests.
TEST_APPS = "tools/*/tests/*_app"
TEST_APP_PATTERN = r"^tools/[^/]+/tests/[^/]+_app/"


def _found(pattern: str) -> list[str]:
    return sorted(path.relative_to(REPO_ROOT).as_posix() for path in REPO_ROOT.glob(pattern))


def programs() -> list[list[str]]:
    """The mypy command-line arguments of each program, in the order they run."""
    return [
        # The application package with what it is measured and served by: the devtools,
        # the benchmarks and every tool's sources.
        ["shared", "devtools", "bench", *_found("tools/*/src"), *_found("tools/*/bench")],
        # Apart: a benchmark app is also named function_app.
        ["function_app.py", "triggers"],
        ["tests"],
        # azd's hooks: scripts of Python's standard library, each run alone.
        *[[script] for script in _found("infra/hooks/*.py")],
        *[["--exclude", TEST_APP_PATTERN, folder] for folder in _found("tools/*/tests")],
        *[[folder] for folder in _found(TEST_APPS)],
    ]


def run(arguments: list[str]) -> int:
    print(f"mypy {' '.join(arguments)}", flush=True)
    return subprocess.run(
        [sys.executable, "-m", "mypy", *arguments], cwd=REPO_ROOT, check=False
    ).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Strict mypy over everything we write.")
    parser.add_argument("--list", action="store_true", help="print the programs, do not check")
    args = parser.parse_args(argv)
    if args.list:
        for arguments in programs():
            print(" ".join(arguments))
        return 0
    failed = [arguments for arguments in programs() if run(arguments) != 0]
    for arguments in failed:
        print(f"mypy found errors in: {' '.join(arguments)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
