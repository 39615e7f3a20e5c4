"""The documentation holds together: README.md and docs/*.md link only to files and headings
that exist, the README stays a front door, and docs/settings.md documents every app setting
of the settings model exactly once (and none it lacks)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from pydantic import AliasChoices, AliasPath

from shared.settings import setting_fields

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
SETTINGS_PAGE = DOCS / "settings.md"
README_MAX_LINES = 200

# Settings docs/settings.md documents on purpose although the settings model has no field
# for them: the Functions host, its Python worker and the extensions read them, not the app.
HOST_SETTINGS = frozenset(
    {
        "AzureWebJobsStorage",  # the Functions host's own storage (keys, leases, receipts)
        "AzureWebJobsStorage__accountName",  # its identity-based form in Azure
        "AzureWebJobsStorage__credential",
        "AzureWebJobsStorage__clientId",
        "FUNCTIONS_WORKER_RUNTIME",  # the host: the worker's language (Core Tools, locally)
        "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY",  # the Python worker's telemetry switch
        "PYTHON_APPLICATIONINSIGHTS_LOGGER_NAME",  # the loggers the worker exports
        "APPLICATIONINSIGHTS_CONNECTION_STRING",  # the host's and the worker's exporter
        "APPLICATIONINSIGHTS_AUTHENTICATION_STRING",  # Microsoft Entra ingestion
        "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS",  # the Azure Monitor distro
        "Storage__queueServiceUri",  # the blob trigger's extension (its poison queue)
        "Storage__credential",  # the blob trigger's extension (managedidentity)
    }
)

CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
SETTING_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
CELL_SEPARATOR = re.compile(r"(?<!\\)\|")


def doc_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """Numbered lines outside fenced code blocks (fences may be indented in lists)."""
    lines: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        match = re.match(r"^\s*(```+|~~~+)", line)
        if match:
            marker = match.group(1)[:3]
            if fence is None:
                fence = marker
                continue
            if marker == fence:
                fence = None
                continue
        if fence is None:
            lines.append((number, line))
    return lines


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text (links as their text, code as its
    content), lower-cased, punctuation dropped except hyphens and underscores, spaces as
    hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file, with GitHub's -1, -2... for repeats."""
    seen: Counter[str] = Counter()
    found: set[str] = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        slug = github_slug(match.group(2))
        found.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return found


def relative_links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link or image that is not a URL with a scheme."""
    links: list[tuple[int, str]] = []
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(CODE_SPAN.sub("code", line)):
            if not SCHEME.match(target):
                links.append((number, target))
    return links


def broken_links(path: Path) -> list[str]:
    broken: list[str] = []
    for number, target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        if not file_part:
            resolved = path
        elif file_part.startswith("/"):
            resolved = REPO_ROOT / file_part.lstrip("/")
        else:
            resolved = (path.parent / file_part).resolve()
        where = f"{path.relative_to(REPO_ROOT)}:{number}: {target}"
        if not resolved.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{where} (no heading #{anchor} in {resolved.name})")
    return broken


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        (
            "Model capacity: the deployment's quota is the limit",
            "model-capacity-the-deployments-quota-is-the-limit",
        ),
        ("Webhook tenancy (`WebhookTenants`)", "webhook-tenancy-webhooktenants"),
        ("host.json", "hostjson"),
        ("One command: `azd up`", "one-command-azd-up"),
        ("Queue or batch?", "queue-or-batch"),
        (
            "Accounting: tokens per tenant, model, day and mode",
            "accounting-tokens-per-tenant-model-day-and-mode",
        ),
        (
            "Service Bus (`servicebus_listener.py`, `settlement.py`)",
            "service-bus-servicebus_listenerpy-settlementpy",
        ),
        (
            "Lanes: standard, high priority, ordered documents",
            "lanes-standard-high-priority-ordered-documents",
        ),
    ],
)
def test_slugs_follow_githubs_rules(heading: str, slug: str) -> None:
    assert github_slug(heading) == slug


@pytest.mark.parametrize(
    "path", doc_files(), ids=lambda path: path.relative_to(REPO_ROOT).as_posix()
)
def test_every_relative_link_points_at_what_exists(path: Path) -> None:
    assert not broken_links(path), "\n".join(broken_links(path))


def test_readme_is_a_front_door() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines, at most {README_MAX_LINES}: move the detail to docs/"
    )


def test_readme_links_every_docs_page_and_each_links_back() -> None:
    readme_targets = {target.partition("#")[0] for _, target in relative_links(README)}
    pages = sorted(DOCS.glob("*.md"))
    assert pages, "docs/ holds no page"
    unlisted = [page.name for page in pages if f"docs/{page.name}" not in readme_targets]
    assert not unlisted, f"README.md does not link {unlisted}"
    no_way_back = [
        page.name
        for page in pages
        if "../README.md" not in {target.partition("#")[0] for _, target in relative_links(page)}
    ]
    assert not no_way_back, f"these pages do not link back to the README: {no_way_back}"


def _alias_names(alias: str | AliasPath | AliasChoices | None) -> set[str]:
    if alias is None:
        return set()
    if isinstance(alias, str):
        return {alias}
    if isinstance(alias, AliasPath):
        return {str(alias.path[0])}
    return set().union(*(_alias_names(choice) for choice in alias.choices))


def app_setting_names(group: str | None = None) -> set[str]:
    """The app setting names of the settings model: each field's alias (or its name), of
    every field, or of the fields of one group (``global_batch``)."""
    names: set[str] = set()
    for field in setting_fields():
        if group is not None and field.group != group:
            continue
        aliases = _alias_names(field.info.alias) | _alias_names(field.info.validation_alias)
        names |= aliases or {field.attribute}
    return names


def setting_groups() -> list[str]:
    """The groups of the settings model: the fields of Settings that hold a group."""
    return sorted({field.group for field in setting_fields() if field.group})


def _expand(names: list[str]) -> list[str]:
    """`Prefix__a`, `__b` names `Prefix__b`, as the tables abbreviate nested settings."""
    expanded: list[str] = []
    prefix: str | None = None
    for name in names:
        if name.startswith("__") and prefix:
            name = prefix + name
        expanded.append(name)
        prefix = name.split("__", 1)[0]
    return expanded


def documented_settings(group: str | None = None) -> list[str]:
    """The setting names in the first column of every settings table of docs/settings.md
    (a table whose first header cell is "setting"), each as often as it is listed; with
    ``group``, only those of the tables under the heading that names `settings.<group>`
    (up to the next heading of its level or above)."""
    names: list[str] = []
    in_settings_table = False
    in_group = group is None
    group_level = 0
    for _, line in prose_lines(SETTINGS_PAGE.read_text(encoding="utf-8")):
        heading = HEADING.match(line)
        if heading and group is not None:
            level = len(heading.group(1))
            if f"`settings.{group}`" in heading.group(2):
                in_group, group_level = True, level
            elif in_group and level <= group_level:
                in_group = False
        if not in_group:
            continue
        row = line.strip()
        if not row.startswith("|"):
            in_settings_table = False
            continue
        cells = [cell.strip() for cell in CELL_SEPARATOR.split(row.strip("|"))]
        if re.fullmatch(r"[-: ]+", cells[0]):
            continue
        if cells[0].lower() == "setting":
            in_settings_table = True
            continue
        if in_settings_table:
            listed = _expand(re.findall(r"`([^`]+)`", cells[0]))
            names += [name for name in listed if SETTING_NAME.match(name)]
    return names


def test_settings_page_has_settings_tables() -> None:
    assert len(documented_settings()) > 50, "docs/settings.md lost its settings tables"


def test_every_app_setting_is_documented_exactly_once() -> None:
    counts = Counter(documented_settings())
    missing = sorted(name for name in app_setting_names() if counts[name] == 0)
    repeated = sorted(name for name in app_setting_names() if counts[name] > 1)
    assert not missing, f"docs/settings.md does not document {missing}"
    assert not repeated, f"docs/settings.md documents these more than once: {repeated}"


@pytest.mark.parametrize("group", setting_groups())
def test_each_group_is_documented_under_its_own_heading(group: str) -> None:
    """A group's settings are the rows of the tables under its heading, which names the
    group as Python reads it (`settings.global_batch`), and no other settings."""
    headings = [
        line
        for _, line in prose_lines(SETTINGS_PAGE.read_text(encoding="utf-8"))
        if HEADING.match(line) and f"`settings.{group}`" in line
    ]
    assert len(headings) == 1, f"docs/settings.md needs one heading naming `settings.{group}`"
    documented = documented_settings(group)
    assert sorted(documented) == sorted(app_setting_names(group)), (
        f"under {headings[0]!r}: documented {sorted(documented)}, "
        f"the group reads {sorted(app_setting_names(group))}"
    )


def test_the_groups_are_the_models() -> None:
    assert {"global_batch", "eventgrid_pull", "azure_openai", "model_capacity"} <= set(
        setting_groups()
    )
    assert "GlobalBatch__deployments" in app_setting_names("global_batch")


def test_settings_page_documents_no_setting_the_model_lacks() -> None:
    known = app_setting_names() | HOST_SETTINGS
    unknown = sorted({name for name in documented_settings() if name not in known})
    assert not unknown, (
        f"docs/settings.md documents {unknown}, which shared/settings.py does not read "
        "(a setting of the host or an extension belongs in HOST_SETTINGS, with its reason)"
    )


def test_host_settings_are_documented_and_not_the_apps() -> None:
    documented = set(documented_settings())
    assert not HOST_SETTINGS & app_setting_names(), "the model reads these: drop them here"
    assert documented >= HOST_SETTINGS, f"undocumented: {sorted(HOST_SETTINGS - documented)}"
