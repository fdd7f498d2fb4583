"""Smoke test of the installed wheel, run by .ci/run with a fresh venv's Python from outside the checkout.

What a new user gets from `pip install 'sluice-kafka[broker]'`: the `sluice` command runs the test broker
and the proxy in front of it, a real client produces and consumes through the proxy, and nothing but `sluice`
sits at the top of site-packages (`import config` fails).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
import sys
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer

# tests/: the suite's handles on the test broker and the proxy (the product they start is the wheel's).
# Off the path again at once: tests/ has folders named config/, proxy/..., and `import config` must fail.
TESTS = str(Path(__file__).resolve().parents[1])
sys.path.insert(0, TESTS)
from mock_cluster_process import MockCluster  # noqa: E402
from proxy_process import ProxyProcess  # noqa: E402

sys.path.remove(TESTS)

RECORDS = 200


def check_compiled_readers() -> None:
    # The wheel CI builds carries protocol/_compiled.c built (optional in the build: a wheel built without a
    # C compiler would run the Python readers, slower, and nothing else would say so).
    from sluice.protocol import compiled

    missing = [name for name in compiled.__all__ if getattr(compiled, name) is None]
    assert missing == [], f"the wheel has no compiled readers: {missing}"
    # and the compiled sampled-window rate, the window sensors' (quota/_compiled.c)
    from sluice.quota import compiled as quota_compiled
    from sluice.quota.sensor import WindowQuotaSensor

    assert quota_compiled.SampledRate is not None, "the wheel has no compiled sampled-window rate"
    assert type(WindowQuotaSensor(1000, 0).rate) is quota_compiled.SampledRate
    # and the compiled filter runs, every connection's (proxy/data_path/_filter_runs.c)
    from sluice.proxy.data_path.filter_chain import ConnectionFilters
    from sluice.proxy.data_path.filter_runs import FilterRunsInPython

    assert ConnectionFilters.__mro__[1] is not FilterRunsInPython, "the wheel has no compiled filter runs"
    assert ConnectionFilters.__mro__[1].__module__ == "sluice.proxy.data_path._filter_runs"
    # and the request pipeline's compiled hot loops (proxy/data_path/_pipeline_runs.c)
    from sluice.proxy.data_path import request_pipeline

    assert request_pipeline._forward_plain.__module__ == "sluice.proxy.data_path._pipeline_runs", (
        "the wheel has no compiled pipeline runs"
    )
    # and the compiled usage recording of a request (proxy/filters/_usage_recording.c)
    from sluice.proxy.filters import usage_recorder

    assert usage_recorder._record_request.__module__ == "sluice.proxy.filters._usage_recording", (
        "the wheel has no compiled usage recording"
    )
    # and the filters' compiled methods (proxy/filters/_client_quotas.c, _broker_rewrite.c)
    from sluice.proxy.filters import broker_rewrite, client_quotas

    assert client_quotas.ClientQuotas.on_response is not client_quotas.on_response_in_python, (
        "the wheel has no compiled client quotas"
    )
    assert broker_rewrite.BrokerAddressRewrite.on_response is not broker_rewrite.on_response_in_python, (
        "the wheel has no compiled address rewrite"
    )
    # and the connection's compiled passes (proxy/data_path/_connection_passes.c)
    from sluice.proxy.data_path import connection

    assert all(getattr(connection.ClientSide, n) is not m for n, m in connection.PASSES_IN_PYTHON.items()), (
        "the wheel has no compiled connection passes"
    )


def check_top_level() -> None:
    files = importlib.metadata.files("sluice-kafka") or []
    tops = {
        f.parts[0] for f in files if not f.parts[0].endswith((".dist-info", ".data")) and f.parts[0] != ".."
    }
    assert tops == {"sluice"}, f"the wheel installs more than `sluice` at the top: {sorted(tops)}"
    for name in ("config", "protocol", "proxy", "quota", "pipeline"):
        assert importlib.util.find_spec(name) is None, (
            f"`import {name}` works: something else than sluice leaked"
        )
    assert shutil.which("sluice", path=str(Path(sys.executable).parent)), "no `sluice` command in the venv"
    here = Path(importlib.util.find_spec("sluice.proxy").origin).resolve()  # type: ignore[arg-type, union-attr]
    assert "site-packages" in here.parts, (
        f"sluice.proxy is imported from {here}, not from the installed wheel"
    )


def roundtrip() -> None:
    topic = f"smoke-{uuid.uuid4().hex[:8]}"
    with (
        MockCluster(brokers=3, topics={topic: 3}) as cluster,
        ProxyProcess(cluster.bootstrap, command=[str(Path(sys.executable).parent / "sluice")]) as proxy,
    ):
        producer = Producer({"bootstrap.servers": proxy.bootstrap, "linger.ms": 5})
        sent = [f"record-{i}".encode() for i in range(RECORDS)]
        for value in sent:
            producer.produce(topic, value)
        assert producer.flush(30) == 0, "records left unsent"
        del producer  # its connections close now, not as the proxy stops under it
        consumer = Consumer(
            {
                "bootstrap.servers": proxy.bootstrap,
                "group.id": topic,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
            }
        )
        consumer.subscribe([topic])
        received: list[bytes] = []
        for _ in range(300):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                received.append(message.value())
            if len(received) >= RECORDS:
                break
        consumer.close()
        assert sorted(received) == sorted(sent), f"read back {len(received)} of {RECORDS} records"


def main() -> int:
    check_top_level()
    check_compiled_readers()
    roundtrip()
    print(
        f"wheel smoke: sluice {importlib.metadata.version('sluice-kafka')} installed alone, "
        f"{RECORDS} records produced and consumed through `sluice run`"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
