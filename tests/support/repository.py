"""The repository's own files, as git knows them (the packaging and lint tests read them)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def git_paths(*args: str) -> list[str]:
    """The paths a ``git`` listing command prints (skips the test outside a git tree)."""
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git working tree: the candidates come from git ls-files")
    result = subprocess.run(["git", *args, "-z"], cwd=REPO_ROOT, capture_output=True, check=True)
    return [entry for entry in result.stdout.decode("utf-8").split("\0") if entry]


def candidate_files() -> list[str]:
    """Files of the working tree that git knows of (tracked, or untracked and not ignored)."""
    listed = git_paths("ls-files", "--cached", "--others", "--exclude-standard")
    return sorted({path for path in listed if (REPO_ROOT / path).is_file()})
