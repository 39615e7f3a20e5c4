"""One Service Bus function that runs for a while: what a Ctrl-C drain must let finish."""

import json
import os
import time

import azure.functions as func

app = func.FunctionApp()


def record(event: str, message: func.ServiceBusMessage) -> None:
    line = json.dumps(
        {
            "event": event,
            "message_id": message.message_id,
            "delivery_count": message.delivery_count,
            "pid": os.getpid(),
        }
    )
    with open(os.environ["DRAIN_RECORD_FILE"], "a", encoding="utf-8") as handle:
        handle.write(line + "\n")


@app.service_bus_queue_trigger(
    arg_name="message", queue_name="%DrainQueue%", connection="ServiceBusConnection"
)
def long_running(message: func.ServiceBusMessage) -> None:
    record("started", message)
    time.sleep(float(os.environ.get("DRAIN_WORK_SECONDS", "8")))
    record("finished", message)
