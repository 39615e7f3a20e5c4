"""infra/local/compose.yaml runs Microsoft's emulators on the same entity config."""

import re

from tests.infra import INFRA

COMPOSE = INFRA / "local" / "compose.yaml"


def _text() -> str:
    assert COMPOSE.is_file(), f"{COMPOSE} is missing"
    return COMPOSE.read_text(encoding="utf-8")


def test_mounts_the_emulator_config_as_config_json() -> None:
    mounts = re.findall(
        r"^\s*-\s*(\S+):/ServiceBus_Emulator/ConfigFiles/Config\.json", _text(), re.M
    )
    assert mounts == ["./servicebus-emulator.json"]
    assert (COMPOSE.parent / "servicebus-emulator.json").is_file()


def test_runs_the_microsoft_images() -> None:
    images = set(re.findall(r"^\s*image:\s*(\S+)", _text(), re.M))
    assert {image.split(":")[0] for image in images} == {
        "mcr.microsoft.com/azure-messaging/servicebus-emulator",
        "mcr.microsoft.com/azure-sql-edge",
        "mcr.microsoft.com/azure-storage/azurite",
    }


def test_passwords_and_license_come_from_the_environment() -> None:
    for key in ("MSSQL_SA_PASSWORD", "ACCEPT_EULA"):
        values = re.findall(rf"^\s*{key}:\s*(.+)$", _text(), re.M)
        assert values, key
        assert all(value.startswith(f"${{{key}:?") for value in values), values
