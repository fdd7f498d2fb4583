"""librdkafka's log lines, from every confluent-kafka client the test process makes, go to Python logging.

Without a `logger` in its configuration, librdkafka prints lines such as
``%3|1795492047.342|FAIL|rdkafka#producer-1| ... Connection refused`` straight to file descriptor 2, from
its own threads, whenever it likes. A client that is still alive after its test (kept by a traceback, a
fixture or the garbage collector's timing) keeps reconnecting to a proxy or broker that is gone, and its
lines land after pytest's summary, where they read like a failure. With the `librdkafka` logger they are
delivered when the client is polled, pytest shows them beside a failing test, and nothing reaches the
terminal on its own. Child processes need nothing: their stderr is pytest's capture file.

Imported by tests/conftest.py (and usable as a plugin, ``-p quiet_librdkafka``); a test that passes its
own `logger` keeps it.
"""

from __future__ import annotations

import logging
from typing import Any

import confluent_kafka
import confluent_kafka.admin

LOGGER = logging.getLogger("librdkafka")


def _with_logger(config: dict[str, Any] | None, overrides: dict[str, Any]) -> dict[str, Any]:
    merged = {**(config or {}), **overrides}
    merged.setdefault("logger", LOGGER)
    return merged


class Producer(confluent_kafka.cimpl.Producer):
    def __init__(self, config: dict[str, Any] | None = None, /, **overrides: Any) -> None:
        super().__init__(_with_logger(config, overrides))


class Consumer(confluent_kafka.cimpl.Consumer):
    def __init__(self, config: dict[str, Any] | None = None, /, **overrides: Any) -> None:
        super().__init__(_with_logger(config, overrides))


_admin_init = confluent_kafka.admin.AdminClient.__init__


def _admin_init_with_logger(self: Any, conf: dict[str, Any] | None = None, /, **overrides: Any) -> None:
    _admin_init(self, _with_logger(conf, overrides))


def route_librdkafka_logs() -> None:
    """Make every client created from now on log through LOGGER (idempotent)."""
    # Producer and Consumer are extension types, so they are replaced by subclasses. AdminClient is a
    # Python class whose __init__ names its own class in super(), so a subclass standing in for it would
    # recurse: its __init__ is wrapped instead.
    confluent_kafka.Producer = Producer
    confluent_kafka.Consumer = Consumer
    confluent_kafka.admin.AdminClient.__init__ = _admin_init_with_logger


route_librdkafka_logs()
