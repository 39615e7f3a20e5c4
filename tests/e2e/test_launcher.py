"""The launcher's reading of local settings (``python -m devtools.stack``; no services)."""

from __future__ import annotations

from devtools.stack import runtime_counts_port, servicebus_endpoint, storage_ports


def test_stack_reads_ports_from_connection_strings() -> None:
    values = {
        "AzureWebJobsStorage": (
            "DefaultEndpointsProtocol=http;AccountName=a;AccountKey=k;"
            "BlobEndpoint=http://127.0.0.1:20000/a;QueueEndpoint=http://127.0.0.1:20001/a;"
        ),
        "ServiceBusConnection": "Endpoint=sb://127.0.0.1:5999;SharedAccessKeyName=n;"
        "SharedAccessKey=secret;UseDevelopmentEmulator=true",
    }
    assert storage_ports(values) == {"Blob": 20000, "Queue": 20001, "Table": 10002}
    assert storage_ports({"AzureWebJobsStorage": "UseDevelopmentStorage=true"})["Blob"] == 10000
    assert servicebus_endpoint(values) == (5999, "secret")


def test_the_emulator_admin_port_comes_from_the_runtime_counts_url() -> None:
    assert (
        runtime_counts_port({"ServiceBusRuntimeCountsUrl": "http://127.0.0.1:5300/runtime"}) == 5300
    )
    assert runtime_counts_port({}) == 0
