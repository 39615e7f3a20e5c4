"""requirements.txt is the lock of requirements.in: what Azure installs, what CI and
`make bootstrap` install first, hash-checked.

A lock is stale when requirements.in changed and `make lock` did not run: a requirement
added or removed, a range the pin no longer satisfies. It is wrong when a pin lost its
hashes (pip's hash-checking mode then refuses the whole file) or a package it needs is
missing. Everything here is offline: the lock and requirements.in are read as text, and
the dependencies of each pinned package come from the metadata of the venv the tests run
in, which `make bootstrap` installed from this very lock (the first test checks that it
did, or says to bootstrap again).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

REPO_ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS_IN = REPO_ROOT / "requirements.in"
LOCK = REPO_ROOT / "requirements.txt"
MAKEFILE = REPO_ROOT / "Makefile"
# The options of `make lock`, which Dependabot reads back from the lock's header.
LOCK_OPTIONS = ("--generate-hashes", "--allow-unsafe", "--strip-extras")

# A package's version and its requirements (Requires-Dist), as a distribution declares them.
Metadata = Callable[[NormalizedName], tuple[Version, list[Requirement]]]


@dataclass(frozen=True)
class Pin:
    version: Version
    hashes: tuple[str, ...]


def direct_requirements(text: str) -> list[Requirement]:
    """The requirements of requirements.in (no options there: comments and lines only)."""
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return [Requirement(line) for line in lines if line]


def lock_pins(text: str) -> dict[NormalizedName, Pin]:
    """name -> its pin and hashes, from pip-compile's output (continued lines joined)."""
    joined = re.sub(r"\\\n", " ", text)
    pins: dict[NormalizedName, Pin] = {}
    for line in joined.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        requirement = Requirement(words[0])
        exact = [spec for spec in requirement.specifier if spec.operator == "=="]
        assert len(exact) == len(requirement.specifier) == 1, f"not a pin: {words[0]}"
        hashes = tuple(word.removeprefix("--hash=") for word in words[1:])
        assert all(word.startswith("--hash=") for word in words[1:]), line
        pins[canonicalize_name(requirement.name)] = Pin(Version(exact[0].version), hashes)
    return pins


def installed(name: NormalizedName) -> tuple[Version, list[Requirement]]:
    distribution = metadata.distribution(name)
    requires = [Requirement(line) for line in distribution.requires or []]
    return Version(distribution.version), requires


def _applies(requirement: Requirement, extras: Iterable[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in ("", *extras))


def stale_reasons(requirements_in: str, lock: str, read: Metadata) -> list[str]:
    """Why the lock does not lock requirements.in (empty: it does)."""
    pins = lock_pins(lock)
    reasons = [f"{name} has no --hash" for name, pin in pins.items() if not pin.hashes]
    reached: set[NormalizedName] = set()
    visited: set[tuple[NormalizedName, frozenset[str]]] = set()
    pending = [
        (requirement, "requirements.in") for requirement in direct_requirements(requirements_in)
    ]
    while pending:
        requirement, wanted_by = pending.pop()
        name = canonicalize_name(requirement.name)
        pin = pins.get(name)
        if pin is None:
            reasons.append(f"{requirement} ({wanted_by}) is not in the lock")
            continue
        if not requirement.specifier.contains(pin.version, prereleases=True):
            reasons.append(f"{name}=={pin.version} does not satisfy {requirement} ({wanted_by})")
        if (name, frozenset(requirement.extras)) in visited:
            continue
        visited.add((name, frozenset(requirement.extras)))
        reached.add(name)
        version, requires = read(name)
        if version != pin.version:
            reasons.append(
                f"{name} {version} is installed, the lock pins {pin.version} (make bootstrap)"
            )
        pending.extend(
            (dependency, name)
            for dependency in requires
            if _applies(dependency, requirement.extras)
        )
    reasons += [
        f"{name} is locked but nothing requires it" for name in sorted(pins.keys() - reached)
    ]
    return reasons


# --- the lock ---------------------------------------------------------------------------------


def test_the_venv_runs_the_lock() -> None:
    """Every pin installed at its version: the dev requirements moved none of them (a
    failure here after a `make lock` means: run `make bootstrap`)."""
    moved = {}
    for name, pin in lock_pins(LOCK.read_text(encoding="utf-8")).items():
        try:
            version = Version(metadata.version(name))
        except metadata.PackageNotFoundError:
            moved[name] = "not installed"
            continue
        if version != pin.version:
            moved[name] = f"{version}, locked {pin.version}"
    assert not moved, f"the venv does not run the lock (make bootstrap): {moved}"


def test_the_lock_locks_requirements_in() -> None:
    reasons = stale_reasons(
        REQUIREMENTS_IN.read_text(encoding="utf-8"), LOCK.read_text(encoding="utf-8"), installed
    )
    assert not reasons, "requirements.txt is stale (make lock):\n" + "\n".join(reasons)


def test_every_pin_is_hashed_with_sha256() -> None:
    pins = lock_pins(LOCK.read_text(encoding="utf-8"))
    assert canonicalize_name("azure-functions-runtime") in pins
    for name, pin in pins.items():
        assert pin.hashes, name
        assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", digest) for digest in pin.hashes), name


def test_the_lock_says_how_make_lock_compiled_it() -> None:
    """pip-compile's header names the command; Dependabot reads the options from it."""
    header = LOCK.read_text(encoding="utf-8").split("\n\n", 1)[0]
    assert "autogenerated by pip-compile with Python 3.13" in header
    command = next(line for line in header.splitlines() if "pip-compile " in line and "--" in line)
    assert command.rstrip().endswith(" requirements.in"), command
    recipe = MAKEFILE.read_text(encoding="utf-8").split("\nlock:", 1)[1].split("\n\n", 1)[0]
    assert "piptools compile" in recipe
    for option in LOCK_OPTIONS:
        assert option in command.split(), f"the lock was compiled without {option}"
        assert option in recipe.split(), f"make lock does not pass {option}"


def test_bootstrap_installs_the_lock_with_its_hashes() -> None:
    makefile = MAKEFILE.read_text(encoding="utf-8")
    recipe = makefile.split("\n$(VENV_STAMP):", 1)[1].split("\n\n", 1)[0]
    installs = [line.strip() for line in recipe.splitlines() if "pip install" in line]
    assert "--require-hashes -r requirements.txt" in installs[1], installs
    assert installs[2].endswith("-r requirements-dev.txt -c $(LOCK_PINS)"), installs
    dev = (REPO_ROOT / "requirements-dev.txt").read_text(encoding="utf-8")
    assert "--hash" not in dev


def test_setuptools_reads_the_direct_requirements_not_the_lock() -> None:
    """azd may restore with `pip install .`: pyproject's dependencies are requirements.in's."""
    pyproject = (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'dependencies = { file = ["requirements.in"] }' in pyproject


# --- the staleness check fails a stale lock -------------------------------------------------

DIGEST = "sha256:" + "0" * 64
FAKE = {
    "app-sdk": (
        Version("1.2.0"),
        [Requirement("helper>=2"), Requirement("extra-lib; extra == 'x'")],
    ),
    "helper": (Version("2.1.0"), [Requirement("winonly; sys_platform == 'nonesuch'")]),
    "extra-lib": (Version("0.3.0"), []),
    "old-lib": (Version("1.0.0"), []),
}


def fake(name: NormalizedName) -> tuple[Version, list[Requirement]]:
    return FAKE[name]


def locked(*pins: str) -> str:
    return "".join(f"{pin} \\\n    --hash={DIGEST}\n    # via x\n" for pin in pins)


def test_a_fresh_lock_has_no_reasons() -> None:
    assert stale_reasons("app-sdk>=1,<2\n", locked("app-sdk==1.2.0", "helper==2.1.0"), fake) == []
    both = locked("app-sdk==1.2.0", "helper==2.1.0", "extra-lib==0.3.0")
    assert stale_reasons("App_SDK[x]>=1  # a comment\n", both, fake) == []


@pytest.mark.parametrize(
    ("requirements_in", "lock", "reason"),
    [
        (
            "app-sdk>=1\nold-lib\n",
            locked("app-sdk==1.2.0", "helper==2.1.0"),
            "old-lib (requirements.in) is not in the lock",
        ),
        (
            "app-sdk>=1.3\n",
            locked("app-sdk==1.2.0", "helper==2.1.0"),
            "app-sdk==1.2.0 does not satisfy app-sdk>=1.3",
        ),
        (
            "app-sdk\n",
            locked("app-sdk==1.2.0", "helper==2.1.0", "old-lib==1.0.0"),
            "old-lib is locked but nothing requires it",
        ),
        ("app-sdk\n", locked("app-sdk==1.2.0"), "helper>=2 (app-sdk) is not in the lock"),
        ("app-sdk[x]\n", locked("app-sdk==1.2.0", "helper==2.1.0"), "extra-lib"),
        (
            "app-sdk\n",
            locked("app-sdk==1.1.0", "helper==2.1.0"),
            "app-sdk 1.2.0 is installed, the lock pins 1.1.0",
        ),
        (
            "app-sdk\n",
            "app-sdk==1.2.0\nhelper==2.1.0 \\\n    --hash=" + DIGEST + "\n",
            "app-sdk has no --hash",
        ),
    ],
    ids=[
        "added",
        "range moved",
        "removed",
        "dependency missing",
        "extra",
        "not installed",
        "no hash",
    ],
)
def test_a_stale_lock_is_found(requirements_in: str, lock: str, reason: str) -> None:
    reasons = stale_reasons(requirements_in, lock, fake)
    assert any(reason in found for found in reasons), reasons
