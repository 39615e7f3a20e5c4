"""Local Service Bus emulator (AMQP 1.0 on python-qpid-proton) for development and tests.

Production runs on Azure Service Bus; this package only lets the app and its tests run
on one machine without Azure or Docker. See README.md beside this file.
"""
