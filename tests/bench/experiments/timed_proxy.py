"""`sluice run ...` with the thread CPU time of chosen callbacks and methods counted (inclusive, ns), the
counts reset by SIGRTMIN+3 and written to $TIMED_OUT.<n> (JSON) at the next SIGRTMIN+3.

Started by fetch_gap.py --timed (PYTHONMALLOC=malloc, as `sluice run` would exec itself with). The
wrappers cost ~1 us a call of their own (two thread CPU clock reads), counted in the callers' times.
Where the connection's passes are compiled (proxy/data_path/_connection_passes.c), a read of whole frames
calls none of `_flush`, `_take_requests` and `_take_responses`: their counts are then of the reads handed to
the Python only; `buffer_updated`, `get_buffer` and `upstream_data` (the compiled methods, wrapped) count all.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import signal
import sys
import time
from collections import defaultdict

_ns: defaultdict[str, int] = defaultdict(int)
_calls: defaultdict[str, int] = defaultdict(int)
_state = {"on": False, "n": 0, "start": 0}
_clock = time.thread_time_ns

TARGETS = [
    (
        "sluice.proxy.data_path.connection",
        "ClientSide",
        [
            "buffer_updated",
            "get_buffer",
            "connection_made",
            "connection_lost",
            "eof_received",
            "_flush",
            "_take_requests",
            "_take_responses",
            "upstream_data",  # what the upstream transport calls itself (UpstreamSide.data_received)
        ],
    ),
    ("sluice.proxy.data_path.filter_chain", "ConnectionFilters", ["on_request", "on_response"]),
    ("sluice.proxy.filters.client_quotas", "ClientQuotas", ["on_request", "on_response"]),
    ("sluice.proxy.filters.usage_recorder", "UsageRecorder", ["on_request", "on_response"]),
    ("sluice.proxy.filters.broker_rewrite", "BrokerAddressRewrite", ["on_request", "on_response"]),
    ("sluice.proxy.kafka_client.connection", "BrokerConnection", ["data_received", "connection_made"]),
    ("sluice.proxy.usage_plane.usage_publisher", "UsagePublisher", ["publish_interval"]),
]


def _wrap(key: str, method):  # type: ignore[no-untyped-def]
    @functools.wraps(method)
    def timed(*args, **kwargs):  # type: ignore[no-untyped-def]
        if not _state["on"]:
            return method(*args, **kwargs)
        start = _clock()
        try:
            return method(*args, **kwargs)
        finally:
            _ns[key] += _clock() - start
            _calls[key] += 1

    return timed


def _install() -> None:
    for module_name, class_name, methods in TARGETS:
        module = importlib.import_module(module_name)
        cls = getattr(module, class_name)
        for name in methods:
            method = getattr(cls, name)
            timed = _wrap(f"{class_name}.{name}", method)
            setattr(cls, name, timed)
            # A module's own name for the method (connection.py hands `_pass` its functions as _TAKE_REQUESTS
            # and the like) is wrapped with it.
            for alias, value in list(vars(module).items()):
                if value is method:
                    setattr(module, alias, timed)


def _toggle(_signum: int, _frame: object) -> None:
    if not _state["on"]:
        _ns.clear()
        _calls.clear()
        _state["start"] = _clock()
        _state["on"] = True
        return
    _state["on"] = False
    out = {"thread_ns": _clock() - _state["start"], "ns": dict(_ns), "calls": dict(_calls)}
    with open(f"{os.environ['TIMED_OUT']}.{_state['n']}", "w") as f:
        json.dump(out, f)
    _state["n"] += 1


signal.signal(signal.SIGRTMIN + 3, _toggle)
_install()

from sluice.proxy.cli import main  # noqa: E402

sys.exit(main())
