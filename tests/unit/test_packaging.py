"""What `func azure functionapp publish` and `azd deploy` ship: the app and nothing else.

The app is function_app.py, host.json, requirements.txt, the model catalog (models.json),
the Python modules under triggers/ and shared/, and those of the packages its catalog's
Python handlers live in (Flex Consumption installs requirements.txt remotely). Both tools zip
the working tree minus .funcignore, so the candidates are the files git knows of: tracked
files plus untracked files that .gitignore does not exclude. Local artefacts that git
ignores (.venv, node_modules, caches, local.settings.json) are checked on their own.

The two tools read .funcignore differently, so each reading is modelled:

- azd: gitignore semantics (pathspec's GitIgnoreSpec), plus what azd always leaves out
  (``.azure`` folders, the ignore file itself, ``local.settings.json``);
- Core Tools: its ``GitIgnoreParser``, a C# port of codemix/gitignore-parser, ported again
  below, plus what Core Tools always leaves out (``.git`` and ``.vscode`` folders;
  ``.funcignore``, ``.gitignore``, ``local.settings.json`` and ``project.lock.json``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable

import pathspec
import pytest

from tests.support.repository import REPO_ROOT, candidate_files, git_paths

FUNCIGNORE = REPO_ROOT / ".funcignore"

APP_FILES = {"function_app.py", "host.json", "requirements.txt", "models.json"}
APP_PACKAGES = ("triggers/", "shared/")


# --- the two readings of .funcignore ------------------------------------------------------


def pattern_lines(text: str) -> list[str]:
    """The patterns of an ignore file: no blank lines, no comments."""
    lines = (line.strip() for line in text.split("\n"))
    return [line for line in lines if line and not line.startswith("#")]


def azd_excludes(text: str) -> Callable[[str], bool]:
    """azd: gitignore semantics over the service folder (denormal/go-gitignore)."""
    spec = pathspec.GitIgnoreSpec.from_lines(pattern_lines(text))

    def excluded(path: str) -> bool:
        *folders, name = path.split("/")
        if ".azure" in folders or name in (".funcignore", "local.settings.json"):
            return True
        return bool(spec.match_file(path))

    return excluded


# Core Tools escapes these characters, then turns "**" into "(.+)" and "*" into "([^\/]+)",
# and tests "^((p1)|(p2)...)\b" (ECMAScript: ASCII word boundary) against each file's path.
_CORE_SPECIALS = re.compile(r"[\-\[\]\/\{\}\(\)\+\?\.\\\^\$\|]")
_CORE_FOLDERS = {".git", ".vscode"}
_CORE_FILES = {".funcignore", ".gitignore", "local.settings.json", "project.lock.json"}


def _core_regex(patterns: list[str]) -> re.Pattern[str]:
    if not patterns:
        return re.compile(r"$^")
    prepared = [
        _CORE_SPECIALS.sub(lambda match: "\\" + match.group(), pattern)
        .replace("**", "(.+)")
        .replace("*", r"([^\/]+)")
        for pattern in sorted(patterns)
    ]
    return re.compile("^((" + ")|(".join(prepared) + r"))\b", re.ASCII)


def core_tools_excludes(text: str) -> Callable[[str], bool]:
    """Core Tools: Azure.Functions.Cli.Common.GitIgnoreParser.Denies, and fixed exclusions."""
    positives: list[str] = []
    negatives: list[str] = []
    for line in pattern_lines(text):
        negated = line.startswith("!")
        pattern = line[1:] if negated else line
        pattern = pattern.removeprefix("/")
        (negatives if negated else positives).append(pattern)
    positive, negative = _core_regex(positives), _core_regex(negatives)

    def excluded(path: str) -> bool:
        *folders, name = path.split("/")
        if any(folder.lower() in _CORE_FOLDERS for folder in folders):
            return True
        if name.lower() in _CORE_FILES:
            return True
        return bool(positive.match(path)) and not negative.match(path)

    return excluded


READERS: dict[str, Callable[[str], Callable[[str], bool]]] = {
    "azd": azd_excludes,
    "core-tools": core_tools_excludes,
}


# --- the repository -----------------------------------------------------------------------


# Gitignored, yet part of the app: built into it by `make bootstrap` (the API page's
# vendored Swagger UI files), so both tools must ship them.
BUILT_INTO_THE_APP = ("shared/entrypoints/http/docs/vendor/",)


def ignored_local_artefacts() -> list[str]:
    """One real file for each file or folder that .gitignore keeps out of git (but those
    the build puts into the app)."""
    found = []
    for entry in git_paths(
        "ls-files", "--others", "--ignored", "--exclude-standard", "--directory"
    ):
        path = REPO_ROOT / entry
        if path.is_file():
            found.append(entry)
        elif path.is_dir():
            sample = next((p for p in sorted(path.rglob("*")) if p.is_file()), None)
            if sample is not None:
                found.append(sample.relative_to(REPO_ROOT).as_posix())
    return [f for f in found if not f.startswith(BUILT_INTO_THE_APP)]


@pytest.mark.parametrize("reader", sorted(READERS))
def test_what_the_build_puts_into_the_app_ships(reader: str) -> None:
    built = ["shared/entrypoints/http/docs/vendor/swagger-ui/swagger-ui-bundle.js"]
    assert sorted(shipped(reader, built)) == built


def handler_packages() -> tuple[str, ...]:
    """The top-level packages (or modules) of the Python handlers the catalog names: a
    team's own model code ships with the app (``provider: python``)."""
    catalog = json.loads((REPO_ROOT / "models.json").read_text(encoding="utf-8"))
    handlers = [
        entry["handler"]
        for entry in catalog.get("models", {}).values()
        if entry.get("provider") == "python" and isinstance(entry.get("handler"), str)
    ]
    tops = {handler.partition(":")[0].split(".")[0] for handler in handlers}
    return tuple(f"{top}/" for top in tops) + tuple(f"{top}.py" for top in tops)


def the_app(candidates: Iterable[str]) -> set[str]:
    """What must ship: the top-level files, the Python modules of the app, and those of
    the handlers its model catalog names."""
    packages = APP_PACKAGES + handler_packages()
    modules = {p for p in candidates if p.startswith(packages) and p.endswith(".py")}
    return APP_FILES | modules


def shipped(reader: str, candidates: Iterable[str]) -> set[str]:
    excluded = READERS[reader](FUNCIGNORE.read_text(encoding="utf-8"))
    return {path for path in candidates if not excluded(path)}


def packaging_diff(actual: set[str], expected: set[str]) -> str:
    """A readable diff: "+" ships but is not the app, "-" is the app but does not ship."""
    lines = [
        f"  + {path}    ships, but is not the app: list it in .funcignore"
        for path in sorted(actual - expected)
    ]
    lines += [
        f"  - {path}    is the app, but is left out: fix .funcignore"
        for path in sorted(expected - actual)
    ]
    return "\n".join(lines)


# --- tests --------------------------------------------------------------------------------


def test_funcignore_exists() -> None:
    assert FUNCIGNORE.is_file(), ".funcignore is missing: func and azd would ship the whole folder"


@pytest.mark.parametrize("reader", sorted(READERS))
def test_the_package_is_the_app_and_nothing_else(reader: str) -> None:
    candidates = candidate_files()
    expected = the_app(candidates)
    actual = shipped(reader, candidates)
    if actual != expected:
        diff = packaging_diff(actual, expected)
        print(f"{reader} would package, relative to the app:\n{diff}")
        pytest.fail(f"{reader} would package more or less than the app:\n{diff}", pytrace=False)


@pytest.mark.parametrize("reader", sorted(READERS))
def test_local_artefacts_that_git_ignores_do_not_ship(reader: str) -> None:
    """Both tools zip the working tree, where .venv, node_modules and caches live."""
    leaking = sorted(shipped(reader, ignored_local_artefacts()))
    assert not leaking, (
        f"{reader} would package local artefacts: {leaking}; list them in .funcignore"
    )


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize(
    "newcomer",
    ["guides/guide.md", "notes.txt", "shared/data/table.csv", "scripts/seed.py", ".github/ci.yml"],
)
def test_anything_new_outside_the_app_is_reported(reader: str, newcomer: str) -> None:
    """The check itself: a new top-level folder or file, or a non-module in shared/."""
    candidates = [*candidate_files(), newcomer]
    actual = shipped(reader, candidates)
    expected = the_app(candidates)
    if newcomer.startswith(".github/"):
        assert newcomer not in actual  # listed in .funcignore ahead of time
        return
    assert actual - expected == {newcomer}
    assert f"+ {newcomer}" in packaging_diff(actual, expected)


def test_funcignore_uses_only_forms_both_tools_read_alike() -> None:
    """Top-anchored names, one-segment wildcards, "**/name"; no negation, no trailing "/".

    Core Tools anchors every pattern at the top, needs one character or more for "*",
    lets a trailing "/" miss files whose name starts with a dot (its \\b follows the
    slash) and applies "!" regardless of order, so any other form would make the two tools
    package different files.
    """
    portable = re.compile(r"(\*\*)?/[A-Za-z0-9_.*-]+")
    odd = [
        line
        for line in pattern_lines(FUNCIGNORE.read_text(encoding="utf-8"))
        if not portable.fullmatch(line) or "**" in line.lstrip("*")
    ]
    assert not odd, f".funcignore patterns outside the portable forms: {odd}"


@pytest.mark.parametrize(
    ("patterns", "path", "git", "core"),
    [
        ("node_modules/", "node_modules/.bin/azurite", True, False),  # \b after "/" then "."
        ("/node_modules", "node_modules/.bin/azurite", True, True),
        ("__pycache__", "shared/__pycache__/x.pyc", True, False),  # Core Tools anchors at top
        ("**/__pycache__", "__pycache__/x.pyc", True, False),  # "(.+)/" needs a folder
        ("package*.json", "package.json", True, False),  # "*" needs a character
        ("/package*", "package.json", True, True),
        ("/tests", "tests/unit/test_x.py", True, True),
    ],
)
def test_the_two_readings_differ_where_documented(
    patterns: str, path: str, git: bool, core: bool
) -> None:
    """Why the portable forms: the readings agree on them and differ elsewhere."""
    assert azd_excludes(patterns)(path) is git
    assert core_tools_excludes(patterns)(path) is core


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize(
    "path",
    ["azure.yaml", "infra/hooks/postdeploy.sh", "inferbus_env/bin/python", ".azure/dev/.env"],
)
def test_azd_files_and_its_restore_venv_stay_out(reader: str, path: str) -> None:
    """azd restores a Python service into <folder>_env next to the code; never ship it."""
    assert READERS[reader](FUNCIGNORE.read_text(encoding="utf-8"))(path)
