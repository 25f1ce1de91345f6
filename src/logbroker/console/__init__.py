"""The web console: see and operate the embedded broker, or any Kafka cluster, in a browser.

It is a face like the others: every page is made of Kafka admin calls and consumers over the wire
(confluent-kafka, and kafka-python for the calls confluent-kafka lacks), so it works the same on the
embedded broker and on Apache Kafka. Run inside `logbroker serve --console`, it also reads that broker's
own metrics (throughput, fsync latency, disk use) and share-partition locks in process.

`app.build_app` makes the ASGI application (Starlette, Jinja2 templates rendered on the server, charts as
SVG drawn on the server and refreshed by a few lines of JavaScript: no build step); `server` runs it.
"""

from __future__ import annotations

__all__ = ["ConsoleOptions"]

from logbroker.console.options import ConsoleOptions
