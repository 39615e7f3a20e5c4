"""Every resource type uses one API version, the one infra/README.md lists with its reason.

The versions are the newest GA ones Azure/bicep-types-az publishes (infra/README.md, API
versions); this keeps the templates, across files, and that table from drifting apart.
"""

from __future__ import annotations

import re

from tests.infra import INFRA, bicep_files, read, resources

_ROW = re.compile(r"^\| (`Microsoft\.[^|]+) \| `(\d{4}-\d{2}-\d{2})` \| [^|]+ \|$", re.MULTILINE)


def used_versions() -> dict[str, set[str]]:
    """Resource type -> the API versions the templates use for it (existing ones too)."""
    found: dict[str, set[str]] = {}
    for path in bicep_files():
        for resource in resources(path).values():
            found.setdefault(resource["type"], set()).add(resource["api_version"])
    return found


def documented_versions() -> dict[str, str]:
    """Resource type -> version, from the README table (a row may name child types
    relative to its first, fully qualified one)."""
    section = read(INFRA / "README.md").split("### API versions", 1)[1].split("\n### ", 1)[0]
    table: dict[str, str] = {}
    for names, version in _ROW.findall(section):
        written = re.findall(r"`([^`]+)`", names)
        first = written[0]
        provider = first.split("/")[0]
        table[first] = version
        for child in written[1:]:
            full = child if child.startswith("Microsoft.") else f"{provider}/{child}"
            table[full] = version
    return table


def test_each_type_uses_one_version() -> None:
    mixed = {kind: versions for kind, versions in used_versions().items() if len(versions) > 1}
    assert not mixed, f"one API version per resource type: {mixed}"


def test_the_readme_lists_each_version_in_use() -> None:
    documented = documented_versions()
    for kind, versions in used_versions().items():
        if kind.startswith("Microsoft.ServiceBus/namespaces/"):
            kind = "Microsoft.ServiceBus/namespaces"  # "and its queues, topics, ..."
        assert kind in documented, f"infra/README.md, API versions, lacks {kind}"
        assert versions == {documented[kind]}, kind


def test_no_preview_version() -> None:
    previews = {
        kind: versions
        for kind, versions in used_versions().items()
        if any("preview" in version for version in versions)
    }
    assert not previews
