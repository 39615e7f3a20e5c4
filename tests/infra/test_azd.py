"""azure.yaml and the Bicep agree: one `azd up` provisions, deploys and subscribes.

azd provisions ``infra/<module>.bicep`` (parameters from ``infra/<module>.bicepparam``,
which it prefers to ``<module>.parameters.json``), deploys each service to the resource
tagged ``azd-service-name: <service>``, and runs the ``postdeploy`` hook (stage 2) after the
code is published. PyYAML is not a dependency, so azure.yaml is read by a strict reader of
the YAML it uses (block mappings of plain scalars): anything else fails loudly.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import pytest

from tests.infra import (
    FUNCTION_APP,
    INFRA,
    MAIN,
    REPO_ROOT,
    constants,
    declares_target_scope,
    decorator,
    has_default,
    is_reference,
    modules,
    outputs,
    params,
    read,
    render,
    resolve,
    resource_body,
    resources,
    resources_of_type,
    variables,
)

AZURE_YAML = REPO_ROOT / "azure.yaml"
BICEPPARAM = INFRA / "main.bicepparam"
SECOND_STAGE = INFRA / "eventgrid-subscriptions.bicep"
TAG = "azd-service-name"


class YamlSubsetError(ValueError):
    """azure.yaml uses YAML outside the subset this reader understands."""


def _without_comment(line: str) -> str:
    if line.lstrip().startswith("#"):
        return ""
    quoted = re.match(r"""(\s*[^:#]+:\s+)(['"])(.*?)\2""", line)
    start = quoted.end() if quoted else 0
    cut = line.find(" #", start)
    return line if cut == -1 else line[:cut]


def read_yaml_subset(text: str) -> dict[str, Any]:
    """Nested block mappings whose leaves are plain or quoted scalars, with comments."""
    root: dict[str, Any] = {}
    # (indent of the key owning the mapping, the mapping, indent of its entries)
    stack: list[list[Any]] = [[-1, root, None]]
    opened: list[tuple[int, str, dict[str, Any]]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = _without_comment(raw).rstrip()
        if not line.strip():
            continue
        if "\t" in line:
            raise YamlSubsetError(f"line {number}: tabs")
        indent = len(line) - len(line.lstrip(" "))
        match = re.fullmatch(r"([A-Za-z_][\w.-]*):(?:\s+(.+))?", line.strip())
        if match is None:
            raise YamlSubsetError(f"line {number}: not 'key: value' or 'key:': {raw!r}")
        while stack[-1][0] >= indent:
            stack.pop()
        owner = stack[-1]
        if owner[2] is None:
            owner[2] = indent
        elif owner[2] != indent:
            raise YamlSubsetError(f"line {number}: inconsistent indentation")
        mapping: dict[str, Any] = owner[1]
        key, value = match.group(1), match.group(2)
        if key in mapping:
            raise YamlSubsetError(f"line {number}: duplicate key {key!r}")
        if value is None:
            child: dict[str, Any] = {}
            mapping[key] = child
            stack.append([indent, child, None])
            opened.append((number, key, child))
            continue
        if value[0] in "[]{}&*!|>-@`%":
            raise YamlSubsetError(f"line {number}: only plain or quoted scalars: {value!r}")
        if len(value) >= 2 and value[0] in "'\"" and value[-1] == value[0]:
            value = value[1:-1]
        mapping[key] = value
    for number, key, child in opened:
        if not child:
            raise YamlSubsetError(f"line {number}: {key!r} has no value")
    return root


def azure_yaml() -> dict[str, Any]:
    assert AZURE_YAML.is_file(), "azure.yaml is missing at the repository root"
    return read_yaml_subset(AZURE_YAML.read_text(encoding="utf-8"))


def the_service() -> tuple[str, dict[str, Any]]:
    services = azure_yaml()["services"]
    assert len(services) == 1, f"one service, the Function App; found {sorted(services)}"
    ((name, service),) = services.items()
    return name, service


# --- the reader itself --------------------------------------------------------------------


def test_yaml_reader_reads_nested_mappings_and_comments() -> None:
    text = "# head\nname: x  # trailing\na:\n  b: 'q # not a comment'\n  c:\n    d: \"e\"\nf: g\n"
    assert read_yaml_subset(text) == {
        "name": "x",
        "a": {"b": "q # not a comment", "c": {"d": "e"}},
        "f": "g",
    }


@pytest.mark.parametrize(
    "text",
    ["a:\n  - b\n", "a: [b, c]\n", "a:\n  b: c\n   d: e\n", "a: b\na: c\n", "a:\nb: c\n"],
    ids=["list", "flow", "indentation", "duplicate", "empty"],
)
def test_yaml_reader_refuses_what_it_does_not_understand(text: str) -> None:
    with pytest.raises(YamlSubsetError):
        read_yaml_subset(text)


# --- azure.yaml ---------------------------------------------------------------------------


def test_infra_is_the_bicep_of_infra_main() -> None:
    infra = azure_yaml()["infra"]
    assert infra == {"provider": "bicep", "path": "infra", "module": "main"}
    assert (REPO_ROOT / infra["path"] / f"{infra['module']}.bicep") == MAIN
    assert MAIN.is_file()


def test_the_service_is_the_python_function_app_at_the_root() -> None:
    _, service = the_service()
    assert service == {"project": ".", "language": "python", "host": "function"}
    assert (REPO_ROOT / service["project"] / "function_app.py").is_file()
    assert (REPO_ROOT / service["project"] / ".funcignore").is_file(), (
        "azd packages a function service minus its .funcignore"
    )


def test_the_function_app_and_nothing_else_carries_the_service_tag() -> None:
    name, _ = the_service()
    site_tags = resource_body(modules(MAIN)["functionApp"])["params"]["siteTags"]
    assert resolve(site_tags, constants(MAIN)) == {TAG: name}
    (site,) = resources_of_type(FUNCTION_APP, "Microsoft.Web/sites").values()
    assert render(resource_body(site)["tags"]) == "union(tags, siteTags)"
    (plan,) = resources_of_type(FUNCTION_APP, "Microsoft.Web/serverfarms").values()
    assert is_reference(resource_body(plan)["tags"], "tags")
    mentions = [path.name for path in INFRA.rglob("*.bicep") if f"'{TAG}':" in read(path)]
    assert mentions == ["main.bicep"], f"only the Function App may carry {TAG}: {mentions}"


def test_main_is_resource_group_scoped_and_needs_no_location_from_azd() -> None:
    assert declares_target_scope(MAIN, "resourceGroup")
    assert has_default(params(MAIN)["location"])


# --- main.bicepparam ----------------------------------------------------------------------

_ASSIGNMENT = re.compile(r"^param\s+(\w+)\s*=\s*(.+)$", re.MULTILINE)
_READ_ENV = re.compile(r"readEnvironmentVariable\(\s*'(\w+)'\s*(?:,\s*'([^']*)'\s*)?\)")


def bicepparam_assignments() -> dict[str, str]:
    text = BICEPPARAM.read_text(encoding="utf-8")
    assert re.search(r"^using\s+'main\.bicep'\s*$", text, re.MULTILINE)
    return {match.group(1): match.group(2).strip() for match in _ASSIGNMENT.finditer(text)}


def test_bicepparam_sets_every_required_parameter_from_the_azd_environment() -> None:
    assignments = bicepparam_assignments()
    declared = params(MAIN)
    assert set(assignments) <= set(declared), "bicepparam sets parameters main.bicep lacks"
    required = {name for name, param in declared.items() if not has_default(param)}
    assert required <= set(assignments), f"azd cannot supply {required - set(assignments)}"
    assert assignments["environmentName"] == "readEnvironmentVariable('AZURE_ENV_NAME')"


def test_bicepparam_fallbacks_are_the_defaults_of_main() -> None:
    declared = params(MAIN)
    for name, value in bicepparam_assignments().items():
        read_env = _READ_ENV.search(value)
        assert read_env, f"{name} should come from the azd environment"
        fallback: str | int | bool | None = read_env.group(2)
        if value.startswith("int(") and fallback is not None:
            fallback = int(fallback)  # an int parameter reads its text through int()
        if value.endswith("== 'true'") and fallback is not None:
            fallback = fallback == "true"  # a bool parameter compares its text with 'true'
        if has_default(declared[name]):
            assert fallback == declared[name]["default"], f"{name}: {fallback!r}"
        else:
            # A required parameter has no fallback, or an empty one its @minLength refuses
            # (the preprovision hook supplies it; the empty text cannot hide it).
            refused = fallback == "" and (decorator(declared[name], "min_length") or 0) > 0
            assert fallback is None or refused, f"{name} is required: no fallback may hide it"
        allowed = decorator(declared[name], "allowed")
        if allowed:
            literals = set(re.findall(r"'([^']*)'", _READ_ENV.sub("", value)))
            assert literals <= set(allowed), name


def test_az_cli_parameters_deploy_what_azd_deploys() -> None:
    """main.parameters.json (the az CLI path) names only parameters of main.bicep, and the
    ones azd reads from its environment keep main.bicep's defaults there too, so both paths
    deploy the same model and tenancy unless told otherwise."""
    document = json.loads(read(INFRA / "main.parameters.json"))
    declared = params(MAIN)
    given = {name: entry["value"] for name, entry in document["parameters"].items()}
    assert set(given) <= set(declared), f"unknown parameters: {set(given) - set(declared)}"
    for name in set(given) & set(bicepparam_assignments()):
        if has_default(declared[name]):
            assert given[name] == declared[name]["default"], name
    assert given["modelProvider"] == "azure_openai"
    assert "allowedModels" not in given, "the served aliases default to the deployed model"


def test_readme_documents_every_azd_environment_value() -> None:
    readme = read(INFRA / "README.md")
    names = {
        match.group(1)
        for value in bicepparam_assignments().values()
        for match in _READ_ENV.finditer(value)
    }
    missing = sorted(name for name in names if f"`{name}`" not in readme)
    assert not missing, f"infra/README.md does not explain {missing}"


# --- the postdeploy hook (stage 2) ----------------------------------------------------------


def test_postdeploy_hook_runs_stage_two_on_both_platforms() -> None:
    hook = azure_yaml()["hooks"]["postdeploy"]
    assert set(hook) == {"posix", "windows"}
    assert hook["posix"]["shell"] == "sh"
    assert hook["windows"]["shell"] == "pwsh"
    for platform in hook.values():
        script = REPO_ROOT / platform["run"]
        assert script.is_file(), platform["run"]
        text = script.read_text(encoding="utf-8")
        assert SECOND_STAGE.name in text
        assert "az deployment group create" in text
    assert os.access(REPO_ROOT / hook["posix"]["run"], os.X_OK)


def test_postdeploy_hook_reads_outputs_that_main_declares() -> None:
    declared = outputs(MAIN)
    second_stage = params(SECOND_STAGE)
    for script in (INFRA / "hooks").glob("postdeploy.*"):
        text = script.read_text(encoding="utf-8")
        used = set(re.findall(r"\$\{(\w+):\?", text)) | set(re.findall(r"Require '(\w+)'", text))
        outputs_used = {name for name in used if not name.startswith("AZURE_")}
        assert outputs_used == {"environmentName", "functionAppName"}, script.name
        assert outputs_used <= set(declared), f"{script.name} reads outputs main lacks"
        passed = set(re.findall(r"--parameters\s+\"?(\w+)=", text))
        assert passed <= set(second_stage), f"{script.name} passes unknown parameters"
        assert {name for name, p in second_stage.items() if not has_default(p)} <= passed


def test_main_outputs_the_environment_name_it_was_given() -> None:
    assert is_reference(outputs(MAIN)["environmentName"], "environmentName")


def test_stage_two_derives_resource_names_as_main_does() -> None:
    """Stage 2 finds stage 1's resources by name: same token, same derivation per name."""
    main, second = variables(MAIN), variables(SECOND_STAGE)
    assert second["token"] == main["token"]
    assert render(main["token"]) == (
        "to_lower(unique_string(subscription().id, resource_group().id, environmentName))"
    )
    assert set(second["names"]) <= set(main["names"])
    for name, derivation in second["names"].items():
        assert derivation == main["names"][name], name
        assert render(derivation) == render(main["names"][name]), name
    passed = resource_body(modules(SECOND_STAGE)["subscriptions"])["params"]
    used = {render(value) for value in passed.values()}
    assert {f"names.{name}" for name in second["names"]} - {"names.functionApp"} <= used
    site = resource_body(resources(SECOND_STAGE)["site"])
    assert render(site["name"]) == "names.functionApp"


def test_stage_two_is_never_part_of_provisioning() -> None:
    """azd provisions main.bicep alone; the subscriptions need the deployed code."""
    assert not any(
        "eventgrid-subscriptions" in item["detail"]["path"] for item in modules(MAIN).values()
    )
    assert "eventgrid-subscriptions" not in "".join(
        line for line in read(MAIN).splitlines() if not line.lstrip().startswith("//")
    )
