"""Junk in, ProxyConfig or ConfigError out: nothing else may escape load_config."""

import tempfile
from pathlib import Path

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.config import ConfigError, ProxyConfig, load_config

BASE = {"listen": "127.0.0.1:9092", "upstream.bootstrap": ["kafka:19092"]}
KEYS = [
    "listen",
    "advertised_host",
    "broker_port_base",
    "broker_ports",
    "upstream",
    "upstream.bootstrap",
    "max_frame_bytes",
    "idle_timeout_s",
    "shutdown_timeout_s",
    "metrics",
    "metrics.listen",
    "log",
    "log.level",
    "log.format",
    "quota",
    "broker_ports.3",
    "client",
    "client.client_id",
    "client.request_timeout_s",
    "client.sasl",
    "client.sasl.mechanism",
    "client.sasl.username",
    "client.sasl.password",
    "unknown",
]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=30)
    | st.sampled_from(["127.0.0.1:9092", "[::1]:1", "0.0.0.0:80", "h:65535", "a:1,b:2", "::", "info", "json"])
)
junk = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            scalars.filter(lambda v: v is not None and not isinstance(v, float)), inner, max_size=4
        )
    ),
    max_leaves=12,
)


def load_or_error(path: Path | None, overrides: dict[str, object] | None) -> None:
    try:
        result = load_config(path, overrides)
    except ConfigError as error:
        assert str(error).startswith(f"config error: {error.key}=")
    else:
        assert isinstance(result, ProxyConfig)


@settings(max_examples=300, deadline=None)
@given(key=st.sampled_from(KEYS), value=junk)
def test_junk_value_for_any_key_by_override(key: str, value: object) -> None:
    load_or_error(None, {**BASE, key: value})


@settings(max_examples=150, deadline=None)
@given(tree=st.dictionaries(st.sampled_from(KEYS), junk, max_size=6))
def test_junk_file_built_from_known_keys(tree: dict[str, object]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "c.yaml"
        path.write_text(yaml.safe_dump(tree))
        load_or_error(path, None)
        load_or_error(path, BASE)


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=200))
def test_junk_file_text(text: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "c.yaml"
        path.write_text(text, encoding="utf-8")
        load_or_error(path, BASE)


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=200))
def test_junk_file_bytes(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "c.yaml"
        path.write_bytes(data)
        load_or_error(path, BASE)
