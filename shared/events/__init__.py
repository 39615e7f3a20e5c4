"""Events in and out: Event Grid and blob doors, the webhook, and result announcements.

``incoming`` parses push deliveries (both schemas, every CloudEvents mode), ``intake``
turns them into submissions with durable dedupe keys, ``webhook`` and ``webhook_auth``
serve ``/api/v1/events``, ``announcements`` builds the CloudEvents and topic messages that
tell the world a request ended. May import the root of ``shared`` and ``intake``; never
``adapters`` or an SDK.
"""
