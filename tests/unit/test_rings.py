"""The rings of ``shared/``, read from the code's own imports: no import runs back up.

From the bottom: the core (contracts, errors, settings, the job lifecycle...), the domain
(inference, accounting, results), the capabilities (intake, events, processing,
global_batch, producer), the adapters (the only SDK importers), and the entrypoints (the
wiring, the trigger entry points, the HTTP handlers and the command lines), which alone
may import everything. Among the capabilities, processing is the heart: it imports
neither the Global Batch lane (a port, ``processing.ports.BatchStaging``, lets it stage
work) nor the operators' command lines.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT / "shared"

CORE, DOMAIN, CAPABILITIES, ADAPTERS, ENTRYPOINTS = range(5)
RING_NAMES = ("core", "domain", "capabilities", "adapters", "entrypoints")
# The first matching prefix decides: ``shared.ops`` and ``shared.producer.__main__`` keep
# the command names (``python -m shared.ops``) and hand over to ``entrypoints.cli``, so
# they are entrypoints while the rest of ``shared.producer`` is a capability.
RING_OF_PREFIX: tuple[tuple[str, int], ...] = (
    ("shared.entrypoints", ENTRYPOINTS),
    ("shared.ops", ENTRYPOINTS),
    ("shared.producer.__main__", ENTRYPOINTS),
    ("shared.adapters", ADAPTERS),
    ("shared.intake", CAPABILITIES),
    ("shared.events", CAPABILITIES),
    ("shared.processing", CAPABILITIES),
    ("shared.global_batch", CAPABILITIES),
    ("shared.producer", CAPABILITIES),
    ("shared.inference", DOMAIN),
    ("shared.accounting", DOMAIN),
    ("shared.results", DOMAIN),
    ("shared", CORE),
)
# Capability pairs that must never meet, whatever the rings allow.
FORBIDDEN = (
    ("shared.processing", "shared.global_batch"),
    ("shared.processing", "shared.ops"),
)


@dataclass(frozen=True)
class Arrow:
    importer: str
    imported: str
    line: int

    def __str__(self) -> str:
        return f"{self.importer}:{self.line} imports {self.imported}"


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def ring(module: str) -> int:
    for prefix, number in RING_OF_PREFIX:
        if module == prefix or module.startswith(prefix + "."):
            return number
    raise AssertionError(f"{module} is in no ring")


def arrows() -> list[Arrow]:
    """Every import of a ``shared`` module by a ``shared`` module, with its line."""
    found = []
    for path in sorted(SHARED.rglob("*.py")):
        importer = module_name(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module]
                if node.module == "shared":  # from shared import telemetry
                    targets = [f"shared.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            found += [
                Arrow(importer, target, node.lineno)
                for target in targets
                if target == "shared" or target.startswith("shared.")
            ]
    return found


def upward(found: list[Arrow]) -> list[Arrow]:
    return [a for a in found if ring(a.imported) > ring(a.importer)]


def test_no_import_runs_back_up_a_ring() -> None:
    found = arrows()
    assert len(found) > 100, "the reader found too few imports to judge"
    wrong = upward(found)
    assert not wrong, "imports that run back up:\n" + "\n".join(
        f"{a} ({RING_NAMES[ring(a.importer)]} -> {RING_NAMES[ring(a.imported)]})" for a in wrong
    )


@pytest.mark.parametrize(("importer", "imported"), FORBIDDEN)
def test_processing_stands_alone(importer: str, imported: str) -> None:
    wrong = [
        a
        for a in arrows()
        if (a.importer + ".").startswith(importer + ".")
        and (a.imported + ".").startswith(imported + ".")
    ]
    assert not wrong, "\n".join(map(str, wrong))


def test_the_rule_sees_an_upward_import() -> None:
    """The check is not vacuous: a capability importing the wiring is caught."""
    planted = [Arrow("shared.processing.pipeline", "shared.entrypoints.bootstrap", 1)]
    assert upward(planted) == planted
    assert upward([Arrow("shared.entrypoints.bootstrap", "shared.processing", 1)]) == []


def circle(found: list[Arrow]) -> list[str]:
    """One import circle among the modules (a module importing itself counts), as the
    modules met in order; empty when every import points one way. Imports under
    ``TYPE_CHECKING`` count: they tie the modules together for a reader all the same."""
    after: dict[str, set[str]] = {}
    for arrow in found:
        after.setdefault(arrow.importer, set()).add(arrow.imported)
    done: set[str] = set()

    def walk(module: str, path: list[str]) -> list[str]:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return []
        for imported in sorted(after.get(module, ())):
            if found_circle := walk(imported, [*path, module]):
                return found_circle
        done.add(module)
        return []

    for module in sorted(after):
        if found_circle := walk(module, []):
            return found_circle
    return []


def test_no_import_circle_inside_shared() -> None:
    found = arrows()
    assert len(found) > 100, "the reader found too few imports to judge"
    assert circle(found) == [], "an import circle: " + " -> ".join(circle(found))


def test_the_circle_rule_sees_a_circle_through_a_type_only_import() -> None:
    """The check is not vacuous: ports naming a value of the module that uses them is caught."""
    planted = [
        Arrow("shared.intake.claim_checks", "shared.intake.ports", 1),
        Arrow("shared.intake.ports", "shared.intake.claim_checks", 2),
        Arrow("shared.intake.claim_checks", "shared.errors", 3),
    ]
    assert circle(planted) == [
        "shared.intake.claim_checks",
        "shared.intake.ports",
        "shared.intake.claim_checks",
    ]
    assert circle(planted[:1] + planted[2:]) == []


def test_every_exception_class_is_in_the_one_tree() -> None:
    """Each exception class ``shared`` defines derives from ``InferbusError`` (drawn at the
    top of ``errors.py``), so every door maps it to an answer."""
    from shared import errors

    strays = []
    for path in sorted(SHARED.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
            if node.name == "InferbusError":  # the root of the tree
                continue
            if bases & {"Exception", "ValueError", "RuntimeError", "LookupError"}:
                strays.append(f"{module_name(path)}.{node.name}")
    assert not strays, f"exception classes outside the tree of {errors.__name__}: {strays}"


CAPABILITIES_WITH_PORTS = ("intake", "events", "processing", "global_batch", "producer")
# Structural types of values, not ports an adapter implements.
NOT_PORTS = {"shared.processing.adopted_jobs.MessageFacts"}


def test_each_capability_declares_its_ports_in_one_ports_module() -> None:
    """A newcomer finds what a capability needs from the outside in ``<capability>/ports.py``."""
    astray = []
    for capability in CAPABILITIES_WITH_PORTS:
        for path in sorted((SHARED / capability).rglob("*.py")):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                is_protocol = isinstance(node, ast.ClassDef) and any(
                    isinstance(b, ast.Name) and b.id == "Protocol" for b in node.bases
                )
                name = f"{module_name(path)}.{getattr(node, 'name', '')}"
                if is_protocol and path.name != "ports.py" and name not in NOT_PORTS:
                    astray.append(name)
    assert not astray, f"ports outside their capability's ports.py: {astray}"


# The wiring of the entrypoints ring: the only modules that see ``Services`` and the
# settings. ``functions`` dispatches the non-HTTP triggers, ``cli.ops`` and ``cli.producer``
# compose their command lines; every HTTP handler and ops command gets its own values.
WIRING = {
    "shared.entrypoints.bootstrap",
    "shared.entrypoints.builders",
    "shared.entrypoints.port_sets",
    "shared.entrypoints.functions",
    "shared.entrypoints.cli.ops",
    "shared.entrypoints.cli.producer",
}
WIRING_ONLY = (
    "shared.entrypoints.bootstrap",
    "shared.entrypoints.builders",
    "shared.entrypoints.port_sets",
    "shared.settings",
)


def handlers_that_see_the_wiring(found: list[Arrow]) -> list[Arrow]:
    return [
        a
        for a in found
        if ring(a.importer) == ENTRYPOINTS
        and a.importer.startswith("shared.entrypoints.")
        and a.importer not in WIRING
        and a.imported in WIRING_ONLY
    ]


def settings_reads(path: Path) -> list[int]:
    """The lines of ``path`` that read an attribute called ``settings`` (``x.settings``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "settings"
    ]


def test_handlers_and_commands_get_their_values_not_the_services() -> None:
    """No ``Services`` locator and no settings below the wiring: an HTTP handler holds its
    endpoints (``builders.HttpEndpoints``), an ops command what ``cli.ops`` builds."""
    wrong = [str(a) for a in handlers_that_see_the_wiring(arrows())]
    for path in sorted((SHARED / "entrypoints").rglob("*.py")):
        if module_name(path) not in WIRING:
            wrong += [
                f"{module_name(path)}:{line} reads .settings" for line in settings_reads(path)
            ]
    assert not wrong, "\n".join(wrong)


def test_the_handler_rule_sees_a_handler_reaching_for_the_wiring(tmp_path: Path) -> None:
    handler = tmp_path / "handler.py"
    handler.write_text(
        "def limit(services):\n    return services.settings.limits.max_upload_bytes\n"
    )
    assert settings_reads(handler) == [2]
    planted = [
        Arrow("shared.entrypoints.http.requests", "shared.entrypoints.bootstrap", 1),
        Arrow("shared.entrypoints.cli.usage", "shared.settings", 1),
        Arrow("shared.entrypoints.cli.ops", "shared.entrypoints.bootstrap", 1),
    ]
    assert handlers_that_see_the_wiring(planted) == planted[:2]
