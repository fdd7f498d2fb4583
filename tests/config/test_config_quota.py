"""The quota section: the issue's example, defaults, every rule, overrides, apply_to, and junk."""

import math
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.config import ConfigError, FetchThrottle, QuotaRule, QuotaSettings, ThrottleMode, load_config
from sluice.quota import (
    DEFAULT,
    UNLIMITED,
    QuotaConfig,
    QuotaEntity,
    QuotaKey,
    QuotaManagers,
    QuotaWindow,
    SensorKind,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "config-example.yaml"
BASE = {"listen": "127.0.0.1:9092", "upstream.bootstrap": ["kafka:19092"]}
BASE_FILE = "listen: '127.0.0.1:9092'\nupstream: {bootstrap: 'kafka:19092'}\n"

ISSUE_EXAMPLE = """\
quota:
  entities:
    - {client_id: pump, producer_byte_rate: 100000}
    - {user: <default>, consumer_byte_rate: 2048}
"""

P, C, R, M = (
    QuotaKey.PRODUCER_BYTE_RATE,
    QuotaKey.CONSUMER_BYTE_RATE,
    QuotaKey.REQUEST_PERCENTAGE,
    QuotaKey.CONTROLLER_MUTATION_RATE,
)
LONG_EXPECTED = "a whole number in 1..9223372036854775807"
DOUBLE_EXPECTED = "a finite number > 0"


def from_file(tmp_path: Path, text: str) -> QuotaSettings:
    path = tmp_path / "sluice.yaml"
    path.write_text(BASE_FILE + text)
    return load_config(path).quota


def from_overrides(**quota: object) -> QuotaSettings:
    return load_config(overrides={**BASE, **{f"quota.{key}": value for key, value in quota.items()}}).quota


def entities(*entries: object) -> QuotaSettings:
    return from_overrides(entities=list(entries))


def error_for(quota: object) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_config(overrides={**BASE, "quota": quota})
    return caught.value


def check(error: ConfigError, key: str, fragment: str) -> None:
    assert error.key == key
    assert str(error).startswith(f"config error: {key}=")
    assert fragment in str(error)


# -- the issue's example and defaults -----------------------------------------------------------------


def test_issue_example_loads_with_unquoted_default(tmp_path: Path) -> None:
    quota = from_file(tmp_path, ISSUE_EXAMPLE)
    assert quota.rules == (
        QuotaRule(QuotaEntity(client_id="pump"), {P: 100000}),
        QuotaRule(QuotaEntity(user=DEFAULT), {C: 2048}),
    )
    # `<default>` is the engine's DEFAULT entity, not a user literally named "<default>".
    assert quota.rules[1].entity.user is DEFAULT
    assert quota.rules[0].entity.user is None


def test_issue_example_in_block_style(tmp_path: Path) -> None:
    text = (
        "quota:\n  entities:\n"
        "    - client_id: pump\n      producer_byte_rate: 100000\n"
        "    - user: <default>\n      consumer_byte_rate: 2048\n"
    )
    assert from_file(tmp_path, text) == from_file(tmp_path, ISSUE_EXAMPLE)


def test_issue_example_applied_to_managers(tmp_path: Path) -> None:
    quota = from_file(tmp_path, ISSUE_EXAMPLE)
    managers = QuotaManagers(quota.engine)
    quota.apply_to(managers)
    assert managers.produce.resolve("ANONYMOUS", "pump").bound == 100000
    assert managers.produce.resolve("ANONYMOUS", "other").bound == UNLIMITED
    assert managers.fetch.resolve("ANONYMOUS", "pump").bound == 2048
    assert managers.fetch.resolve("bob", "anything").bound == 2048
    assert not managers.request.quotas_enabled
    assert not managers.controller_mutation.quotas_enabled


def test_no_quota_section_gives_the_defaults() -> None:
    quota = load_config(overrides=BASE).quota
    assert quota == QuotaSettings()
    assert quota.rules == ()
    assert quota.throttle_mode is ThrottleMode.KIP219
    assert quota.fetch_throttle is FetchThrottle.EMPTY
    assert quota.engine.client_window == QuotaWindow(num_samples=11, size_s=1)
    assert quota.engine.controller_window == QuotaWindow(num_samples=11, size_s=1)
    assert quota.engine.legacy_windows is False
    assert dict(quota.engine.sensor_kinds) == {
        P: SensorKind.WINDOW,
        C: SensorKind.WINDOW,
        R: SensorKind.WINDOW,
        M: SensorKind.TOKEN_BUCKET,
    }


@pytest.mark.parametrize("text", ["quota:\n", "quota: {}\n", "quota: {window: ~, entities: ~, sensor: ~}\n"])
def test_empty_or_null_quota_keys_give_the_defaults(tmp_path: Path, text: str) -> None:
    assert from_file(tmp_path, text) == QuotaSettings()


def test_documented_example_loads_every_quota_key() -> None:
    quota = load_config(EXAMPLE).quota
    assert quota.engine == QuotaConfig()
    assert quota.throttle_mode is ThrottleMode.KIP219
    assert quota.fetch_throttle is FetchThrottle.EMPTY
    assert quota.rules == (
        QuotaRule(QuotaEntity(client_id="pump"), {P: 100000}),
        QuotaRule(QuotaEntity(user=DEFAULT), {C: 2048}),
        QuotaRule(QuotaEntity(user="alice", client_id=DEFAULT), {R: 50, M: 10}),
    )


# -- every key set ------------------------------------------------------------------------------------


def test_every_key_from_a_file(tmp_path: Path) -> None:
    quota = from_file(
        tmp_path,
        """\
quota:
  window: {samples: 4, size_seconds: 2}
  controller_window: {samples: 6, size_seconds: 3}
  legacy_windows: true
  sensor: {producer_byte_rate: token_bucket, request_percentage: window}
  throttle_mode: auto
  fetch_throttle: pass
  entities:
    - {user: alice, client_id: pump, producer_byte_rate: 1000, consumer_byte_rate: 2000,
       request_percentage: 12.34, controller_mutation_rate: 0.5}
""",
    )
    assert quota.engine.client_window == QuotaWindow(num_samples=4, size_s=2)
    assert quota.engine.controller_window == QuotaWindow(num_samples=6, size_s=3)
    assert quota.engine.legacy_windows is True
    assert quota.engine.sensor_kind(P) is SensorKind.TOKEN_BUCKET
    assert quota.engine.sensor_kind(C) is SensorKind.WINDOW  # not listed: Kafka's choice
    assert quota.engine.sensor_kind(R) is SensorKind.WINDOW
    assert quota.throttle_mode is ThrottleMode.AUTO
    assert quota.fetch_throttle is FetchThrottle.PASS
    (rule,) = quota.rules
    assert rule.entity == QuotaEntity(user="alice", client_id="pump")
    assert dict(rule.values) == {P: 1000.0, C: 2000.0, R: 12.34, M: 0.5}


@pytest.mark.parametrize("kind", ["window", "token_bucket", "TOKEN_BUCKET"])
def test_one_sensor_kind_covers_the_byte_and_request_quotas(kind: str) -> None:
    engine = from_overrides(sensor=kind).engine
    expected = SensorKind(kind.lower())
    assert [engine.sensor_kind(key) for key in (P, C, R)] == [expected] * 3
    assert engine.sensor_kind(M) is SensorKind.TOKEN_BUCKET


def test_controller_mutation_rate_may_be_named_token_bucket() -> None:
    assert from_overrides(sensor={"controller_mutation_rate": "token_bucket"}).engine.sensor_kind(M) is (
        SensorKind.TOKEN_BUCKET
    )


@pytest.mark.parametrize(
    ("text", "mode"),
    [("kip219", ThrottleMode.KIP219), ("delay", ThrottleMode.DELAY), ("AUTO", ThrottleMode.AUTO)],
)
def test_throttle_modes(text: str, mode: ThrottleMode) -> None:
    assert from_overrides(throttle_mode=text).throttle_mode is mode


@pytest.mark.parametrize(("text", "choice"), [("empty", FetchThrottle.EMPTY), ("Pass", FetchThrottle.PASS)])
def test_fetch_throttle_choices(text: str, choice: FetchThrottle) -> None:
    assert from_overrides(fetch_throttle=text).fetch_throttle is choice


def test_window_keys_default_independently() -> None:
    engine = from_overrides(**{"window.size_seconds": 5, "controller_window.samples": 3}).engine
    assert engine.client_window == QuotaWindow(num_samples=11, size_s=5)
    assert engine.controller_window == QuotaWindow(num_samples=3, size_s=1)


@pytest.mark.parametrize("value", [1, 2_147_483])
def test_window_bounds_are_accepted(value: int) -> None:
    assert from_overrides(**{"window.samples": value}).engine.client_window.num_samples == value


@pytest.mark.parametrize("section", ["window", "controller_window"])
@pytest.mark.parametrize(
    ("samples", "size"), [(2**31 - 1, 2**31 - 1), (2_147_484, 1), (1, 2_147_484), (1000, 3600)]
)
def test_a_window_longer_than_an_int32_throttle_is_refused(section: str, samples: int, size: int) -> None:
    # Kafka's throttle_time_ms is an int32 of ms: a longer window owes throttles no answer can carry.
    error = error_for({section: {"samples": samples, "size_seconds": size}})
    check(error, f"quota.{section}", "samples x size_seconds at most 2147483 s")


def test_legacy_windows_accepts_yaml_booleans(tmp_path: Path) -> None:
    assert from_file(tmp_path, "quota: {legacy_windows: yes}\n").engine.legacy_windows is True
    assert from_file(tmp_path, "quota: {legacy_windows: false}\n").engine.legacy_windows is False


# -- overrides (flags) --------------------------------------------------------------------------------


def test_dotted_overrides_set_quota_keys() -> None:
    quota = load_config(
        overrides={
            **BASE,
            "quota.throttle_mode": "delay",
            "quota.window.samples": 5,
            "quota.sensor.consumer_byte_rate": "token_bucket",
            "quota.entities": [{"client_id": "pump", "producer_byte_rate": 100000}],
        }
    ).quota
    assert quota.throttle_mode is ThrottleMode.DELAY
    assert quota.engine.client_window.num_samples == 5
    assert quota.engine.sensor_kind(C) is SensorKind.TOKEN_BUCKET
    assert quota.rules == (QuotaRule(QuotaEntity(client_id="pump"), {P: 100000}),)


def test_overrides_beat_the_file_and_keep_its_other_quota_keys(tmp_path: Path) -> None:
    path = tmp_path / "sluice.yaml"
    path.write_text(BASE_FILE + ISSUE_EXAMPLE + "  throttle_mode: auto\n  window: {samples: 4}\n")
    quota = load_config(path, {"quota.throttle_mode": "delay", "quota.window.size_seconds": 2}).quota
    assert quota.throttle_mode is ThrottleMode.DELAY
    assert quota.engine.client_window == QuotaWindow(num_samples=4, size_s=2)
    assert len(quota.rules) == 2


# -- entities -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "entity"),
    [
        ({"user": "alice"}, QuotaEntity(user="alice")),
        ({"client_id": "pump"}, QuotaEntity(client_id="pump")),
        ({"user": "alice", "client_id": "pump"}, QuotaEntity("alice", "pump")),
        ({"user": "alice", "client_id": "<default>"}, QuotaEntity("alice", DEFAULT)),
        ({"user": "<default>", "client_id": "pump"}, QuotaEntity(DEFAULT, "pump")),
        ({"user": "<default>", "client_id": "<default>"}, QuotaEntity(DEFAULT, DEFAULT)),
        ({"user": "<default>"}, QuotaEntity(user=DEFAULT)),
        ({"client_id": "<default>"}, QuotaEntity(client_id=DEFAULT)),
        ({"user": None, "client_id": "pump"}, QuotaEntity(client_id="pump")),  # null: not given
        ({"user": "CN=a b,O=x", "client_id": " sp "}, QuotaEntity("CN=a b,O=x", " sp ")),  # names kept raw
        ({"client_id": "<DEFAULT>"}, QuotaEntity(client_id="<DEFAULT>")),  # only the exact spelling
    ],
)
def test_entity_shapes(entry: dict[str, object], entity: QuotaEntity) -> None:
    (rule,) = entities({**entry, "request_percentage": 10}).rules
    assert rule.entity == entity


def test_all_eight_precedence_levels_may_be_configured_together() -> None:
    shapes = [
        {"user": "alice", "client_id": "pump"},
        {"user": "alice", "client_id": "<default>"},
        {"user": "alice"},
        {"user": "<default>", "client_id": "pump"},
        {"user": "<default>", "client_id": "<default>"},
        {"user": "<default>"},
        {"client_id": "pump"},
        {"client_id": "<default>"},
    ]
    rules = entities(
        *({**shape, "producer_byte_rate": 1000 * (i + 1)} for i, shape in enumerate(shapes))
    ).rules
    assert [rule.entity.level for rule in rules] == [1, 2, 3, 4, 5, 6, 7, 8]


def test_rules_keep_the_file_order_and_the_values() -> None:
    rules = entities(
        {"client_id": "b", "consumer_byte_rate": 5, "producer_byte_rate": 7},
        {"client_id": "a", "controller_mutation_rate": 2.5},
    ).rules
    assert [rule.entity.client_id for rule in rules] == ["b", "a"]
    assert dict(rules[0].values) == {P: 7.0, C: 5.0}
    assert dict(rules[1].values) == {M: 2.5}


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        (100000, 100000.0),
        (1.0e5, 100000.0),
        (100000.0000001, 100000.0),  # within Kafka's 1e-6 tolerance: taken as the whole number
        (99999.9999999, 100000.0),
        (1, 1.0),
        (2**63 - 1, float(2**63 - 1)),
    ],
)
def test_byte_rates_take_whole_numbers(value: float, stored: float) -> None:
    (rule,) = entities({"client_id": "x", "producer_byte_rate": value, "consumer_byte_rate": value}).rules
    assert rule.values[P] == stored
    assert rule.values[C] == stored


@pytest.mark.parametrize("value", [12.34, 0.001, 1, 1000 / (2**31 - 1), 10**30])
def test_fractional_quotas_for_double_keys(value: float) -> None:
    (rule,) = entities(
        {"client_id": "x", "request_percentage": value, "controller_mutation_rate": value}
    ).rules
    assert rule.values[R] == float(value)
    assert rule.values[M] == float(value)


@pytest.mark.parametrize("value", [1e-300, 5e-324, 4.6e-7])
def test_a_mutation_rate_whose_one_mutation_overflows_the_throttle_is_refused(value: float) -> None:
    # One partition at 1e-300/s owes 1e300 s of throttle: Kafka's int32 ms wraps it to no throttle at all.
    error = error_for({"entities": [{"client_id": "x", "controller_mutation_rate": value}]})
    check(error, "quota.entities[0].controller_mutation_rate", "at least 4.66e-07")


def test_a_name_and_the_default_of_the_same_component_are_different_entities() -> None:
    rules = entities(
        {"user": "alice", "producer_byte_rate": 1},
        {"user": "alice", "client_id": "<default>", "producer_byte_rate": 2},
        {"user": "<default>", "producer_byte_rate": 3},
        {"client_id": "alice", "producer_byte_rate": 4},
    ).rules
    assert len(rules) == 4


# -- errors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("quota", "key", "fragment"),
    [
        ([1, 2], "quota", "a mapping with the keys window, controller_window"),
        ("kip219", "quota", "a mapping"),
        ({"windows": {}}, "quota.windows", "did you mean 'window'?"),
        ({"throttle-mode": "delay"}, "quota.throttle-mode", "did you mean 'throttle_mode'?"),
        ({"entity": []}, "quota.entity", "known keys under quota: window, controller_window"),
        ({"window": 11}, "quota.window", "a mapping with the keys samples, size_seconds"),
        ({"window": {"num": 11}}, "quota.window.num", "known keys under quota.window: samples, size_seconds"),
        (
            {"controller_window": {"size_second": 1}},
            "quota.controller_window.size_second",
            "did you mean 'size_seconds'?",
        ),
        ({"legacy_windows": "true"}, "quota.legacy_windows", "true or false"),
        ({"legacy_windows": 1}, "quota.legacy_windows", "true or false"),
        ({"sensor": "bucket"}, "quota.sensor", "one of window, token_bucket"),
        ({"sensor": 1}, "quota.sensor", "one of window, token_bucket, or a mapping from quota key"),
        ({"sensor": {"produce": "window"}}, "quota.sensor.produce", "known keys under quota.sensor"),
        ({"sensor": {"consumer_byte_rate": "tb"}}, "quota.sensor.consumer_byte_rate", "one of window"),
        (
            {"sensor": {"controller_mutation_rate": "window"}},
            "quota.sensor.controller_mutation_rate",
            "token_bucket (Kafka's mutation quota is always a token bucket)",
        ),
        ({"throttle_mode": "fast"}, "quota.throttle_mode", "one of kip219, delay, auto"),
        ({"throttle_mode": True}, "quota.throttle_mode", "one of kip219, delay, auto"),
        ({"fetch_throttle": "drop"}, "quota.fetch_throttle", "one of empty, pass"),
        ({"entities": {"client_id": "pump"}}, "quota.entities", "a list of entities"),
        ({"entities": "pump"}, "quota.entities", "a list of entities"),
    ],
)
def test_section_rules(quota: object, key: str, fragment: str) -> None:
    check(error_for(quota), key, fragment)


@pytest.mark.parametrize("value", [0, -1, True, "11", 1.5, 11.0, 2**31, [11]])
@pytest.mark.parametrize(
    "key",
    ["window.samples", "window.size_seconds", "controller_window.samples", "controller_window.size_seconds"],
)
def test_window_values_are_positive_ints(key: str, value: object) -> None:
    section, name = key.split(".")
    check(error_for({section: {name: value}}), f"quota.{key}", "an integer in 1..2147483647")


@pytest.mark.parametrize(
    ("entry", "key", "fragment"),
    [
        ("pump", "quota.entities[1]", "a mapping with user and/or client_id and at least one quota key"),
        (None, "quota.entities[1]", "a mapping with user and/or client_id"),
        ({"producer_byte_rate": 1}, "quota.entities[1]", "a user, a client_id, or both"),
        ({"user": None, "producer_byte_rate": 1}, "quota.entities[1]", "a user, a client_id, or both"),
        ({"client_id": "x"}, "quota.entities[1]", "at least one quota key: producer_byte_rate"),
        ({"client_id": "x", "producer_byte_rate": None}, "quota.entities[1]", "at least one quota key"),
        ({"client-id": "x"}, "quota.entities[1].client-id", "did you mean 'client_id'?"),
        ({"client_id": "x", "byte_rate": 1}, "quota.entities[1].byte_rate", "'byte_rate' is unknown"),
        ({"user": "", "producer_byte_rate": 1}, "quota.entities[1].user", "Empty user not supported"),
        ({"client_id": "", "producer_byte_rate": 1}, "quota.entities[1].client_id", "Empty client-id not"),
        (
            {"client_id": 123, "producer_byte_rate": 1},
            "quota.entities[1].client_id",
            "in quotes as the client",
        ),
        ({"client_id": True, "producer_byte_rate": 1}, "quota.entities[1].client_id", "(bool)"),
        ({"user": 1.5, "producer_byte_rate": 1}, "quota.entities[1].user", "(float)"),
        (
            {"user": ["a"], "producer_byte_rate": 1},
            "quota.entities[1].user",
            "a name (a string) or <default>",
        ),
    ],
)
def test_entity_rules(entry: object, key: str, fragment: str) -> None:
    check(error_for({"entities": [{"client_id": "ok", "producer_byte_rate": 1}, entry]}), key, fragment)


@pytest.mark.parametrize(
    "value", [0, -1, 0.0, 10000.5, 0.5, 1e-7, float("nan"), float("inf"), True, "100000", 2**63, 1e19, [1]]
)
@pytest.mark.parametrize("name", ["producer_byte_rate", "consumer_byte_rate"])
def test_byte_rates_are_whole_positive_longs(name: str, value: object) -> None:
    error = error_for(
        {"entities": [{"client_id": "ok", "request_percentage": 1}, {"user": "u", name: value}]}
    )
    check(error, f"quota.entities[1].{name}", LONG_EXPECTED)
    assert "is a LONG in Kafka" in str(error)


@pytest.mark.parametrize("value", [0, -1, -0.5, 0.0, float("nan"), float("inf"), False, "12", 10**400, {}])
@pytest.mark.parametrize("name", ["request_percentage", "controller_mutation_rate"])
def test_double_quotas_are_finite_and_positive(name: str, value: object) -> None:
    check(
        error_for({"entities": [{"client_id": "x", name: value}]}),
        f"quota.entities[0].{name}",
        DOUBLE_EXPECTED,
    )


def test_error_names_full_key_value_and_expectation() -> None:
    error = error_for(
        {
            "entities": [
                {"client_id": "pump", "producer_byte_rate": 1},
                {"user": "u", "producer_byte_rate": 10000.5},
            ]
        }
    )
    assert str(error) == (
        "config error: quota.entities[1].producer_byte_rate=10000.5: expected a whole number in "
        "1..9223372036854775807 (producer_byte_rate is a LONG in Kafka, no fractions)"
    )
    assert (error.key, error.value) == ("quota.entities[1].producer_byte_rate", 10000.5)


def test_yaml_exponent_without_a_dot_gets_a_hint(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        from_file(tmp_path, "quota:\n  entities:\n    - {client_id: pump, producer_byte_rate: 1e5}\n")
    check(caught.value, "quota.entities[0].producer_byte_rate", "write 100000 or 1.0e+5")
    assert caught.value.value == "1e5"


@pytest.mark.parametrize("text", ["123", "yes", "0x10", "2024-01-01", "1.5"])
def test_yaml_non_string_client_ids_must_be_quoted(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        from_file(tmp_path, f"quota:\n  entities:\n    - {{client_id: {text}, producer_byte_rate: 1}}\n")
    check(caught.value, "quota.entities[0].client_id", "put the name in quotes")
    quoted = from_file(
        tmp_path, f"quota:\n  entities:\n    - {{client_id: '{text}', producer_byte_rate: 1}}\n"
    )
    assert quoted.rules[0].entity.client_id == text


@pytest.mark.parametrize(
    ("first", "second", "described"),
    [
        ({"client_id": "pump"}, {"client_id": "pump"}, "client_id='pump'"),
        ({"user": "<default>"}, {"user": "<default>"}, "user=<default>"),
        (
            {"user": "a", "client_id": "<default>"},
            {"client_id": "<default>", "user": "a"},
            "user='a', client_id=<default>",
        ),
    ],
)
def test_the_same_entity_twice_is_an_error(
    first: dict[str, object], second: dict[str, object], described: str
) -> None:
    error = error_for(
        {
            "entities": [
                {**first, "producer_byte_rate": 1},
                {"client_id": "other", "producer_byte_rate": 1},
                {**second, "consumer_byte_rate": 2},
            ]
        }
    )
    check(error, "quota.entities[2]", f"quota.entities[0] already sets quotas on {described}")
    assert "put all of an entity's quota keys in one entry" in str(error)


def test_user_names_that_kafka_encodes_alike_are_the_same_entity() -> None:
    # Kafka keys users by their URL-encoded name, where an unpaired surrogate encodes like "?".
    error = error_for(
        {"entities": [{"user": "?", "producer_byte_rate": 1}, {"user": "\ud800", "producer_byte_rate": 2}]}
    )
    check(error, "quota.entities[1]", "quota.entities[0] already sets quotas on")


def test_first_problem_in_the_section_order_is_reported() -> None:
    error = error_for({"entities": [{"client_id": ""}], "throttle_mode": "x", "window": {"samples": 0}})
    assert error.key == "quota.window.samples"
    error = error_for({"entities": [{"client_id": ""}], "throttle_mode": "x"})
    assert error.key == "quota.throttle_mode"


def test_unknown_quota_key_is_reported_before_a_missing_required_key() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(overrides={"quota.windw.samples": 3})
    assert caught.value.key == "quota.windw"


# -- the model and apply_to ---------------------------------------------------------------------------


def test_apply_to_sets_every_rule_and_key_on_its_manager() -> None:
    quota = entities(
        {"user": "alice", "client_id": "pump", "producer_byte_rate": 1000, "request_percentage": 50},
        {"user": "<default>", "client_id": "<default>", "consumer_byte_rate": 2000},
        {"client_id": "admin", "controller_mutation_rate": 2.5},
    )
    managers = QuotaManagers(quota.engine)
    quota.apply_to(managers)
    assert managers.produce.rules.entries() == [(QuotaEntity("alice", "pump"), 1000.0)]
    assert managers.request.rules.entries() == [(QuotaEntity("alice", "pump"), 50.0)]
    assert managers.fetch.rules.entries() == [(QuotaEntity(DEFAULT, DEFAULT), 2000.0)]
    assert managers.controller_mutation.rules.entries() == [(QuotaEntity(client_id="admin"), 2.5)]
    assert managers.produce.resolve("alice", "pump").bound == 1000
    assert managers.fetch.resolve("anyone", "anything").bound == 2000
    assert managers.controller_mutation.resolve("ANONYMOUS", "admin").bound == 2.5


def test_apply_to_changes_existing_bounds_and_leaves_other_quotas() -> None:
    managers = QuotaManagers()
    managers.set_quota(QuotaEntity(client_id="pump"), P, 5)
    managers.set_quota(QuotaEntity(client_id="other"), P, 7)
    entities({"client_id": "pump", "producer_byte_rate": 100000}).apply_to(managers)
    assert managers.produce.quota("ANONYMOUS", "pump") == 100000
    assert managers.produce.quota("ANONYMOUS", "other") == 7


def test_new_managers_use_the_engine_settings() -> None:
    quota = from_overrides(
        window={"samples": 4, "size_seconds": 2},
        controller_window={"samples": 3},
        sensor="token_bucket",
        legacy_windows=True,
        entities=[{"client_id": "pump", "producer_byte_rate": 100000}],
    )
    managers = quota.new_managers()
    assert managers.config == quota.engine
    assert managers.produce.window == QuotaWindow(num_samples=4, size_s=2)
    assert managers.produce.sensor_kind is SensorKind.TOKEN_BUCKET
    assert managers.controller_mutation.window == QuotaWindow(num_samples=3, size_s=1)
    assert managers.produce.resolve("ANONYMOUS", "pump").bound == 100000
    # B = N x W x Q tokens: a fresh bucket takes 4 x 2 x 100000 bytes before throttling.
    assert managers.produce.record_and_get_throttle_ms("ANONYMOUS", "pump", 800_000, now_ms=0) == 0
    assert managers.produce.record_and_get_throttle_ms("ANONYMOUS", "pump", 100_000, now_ms=0) == 1000


def test_settings_are_frozen_read_only_and_hashable() -> None:
    quota = entities({"client_id": "pump", "producer_byte_rate": 100000})
    with pytest.raises(AttributeError):
        quota.throttle_mode = ThrottleMode.DELAY  # type: ignore[misc]
    with pytest.raises(TypeError):
        quota.rules[0].values[C] = 1  # type: ignore[index]
    assert hash(quota) == hash(entities({"client_id": "pump", "producer_byte_rate": 100000}))
    assert quota != entities({"client_id": "pump", "producer_byte_rate": 100001})


def test_rule_values_are_a_copy() -> None:
    source = {P: 5.0}
    rule = QuotaRule(QuotaEntity(client_id="x"), source)
    source[C] = 6.0
    assert dict(rule.values) == {P: 5.0}


def test_enums_compare_as_their_yaml_words() -> None:
    assert ThrottleMode.KIP219 == "kip219"
    assert str(FetchThrottle.PASS) == "pass"


# -- junk ---------------------------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(["<default>", "pump", "", "window", "token_bucket", "kip219", "delay", "pass", "1e5"])
)
junk = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
# Mostly plausible values, so that loads succeed often enough for the apply_to check to mean something.
names = st.sampled_from(["<default>", "pump", "alice", "", "<DEFAULT>"]) | st.text(max_size=6) | scalars
rates = st.integers(min_value=1, max_value=10**7) | st.floats(min_value=1e-3, max_value=1e7) | scalars
kinds = st.sampled_from(["window", "token_bucket"]) | scalars
window_ints = st.integers(min_value=1, max_value=100) | scalars
plausible_entities = st.fixed_dictionaries(
    {}, optional={"user": names, "client_id": names, **dict.fromkeys([key.value for key in QuotaKey], rates)}
)
entity_entries = plausible_entities | st.dictionaries(st.sampled_from(["client-id", "user"]), scalars) | junk
windows = st.fixed_dictionaries({}, optional={"samples": window_ints, "size_seconds": window_ints}) | junk
quota_sections = (
    st.fixed_dictionaries(
        {},
        optional={
            "window": windows,
            "controller_window": windows,
            "legacy_windows": st.booleans() | scalars,
            "sensor": kinds
            | st.fixed_dictionaries({}, optional=dict.fromkeys([key.value for key in QuotaKey], kinds)),
            "throttle_mode": st.sampled_from(["kip219", "delay", "auto"]) | scalars,
            "fetch_throttle": st.sampled_from(["empty", "pass"]) | scalars,
            "entities": st.lists(entity_entries, max_size=5) | junk,
        },
    )
    | st.dictionaries(st.text(max_size=8), junk, max_size=3)
    | junk
)
entity_sections = st.fixed_dictionaries({"entities": st.lists(plausible_entities, max_size=6)})

good_names = st.sampled_from(["<default>", "pump", "alice"]) | st.text(min_size=1, max_size=6)
good_values = st.fixed_dictionaries(
    {},
    optional={
        "producer_byte_rate": st.integers(min_value=1, max_value=2**63 - 1),
        "consumer_byte_rate": st.integers(min_value=1, max_value=10**9) | st.sampled_from([1.0e5, 2048.0]),
        "request_percentage": st.floats(min_value=1e-6, max_value=1e4),
        "controller_mutation_rate": st.floats(min_value=1e-6, max_value=1e4) | st.integers(1, 100),
    },
).filter(bool)
good_entities = st.tuples(
    st.fixed_dictionaries({}, optional={"user": good_names, "client_id": good_names}).filter(bool),
    good_values,
).map(lambda parts: {**parts[0], **parts[1]})


def settings_or_error(quota: object) -> None:
    try:
        result = load_config(overrides={**BASE, "quota": quota}).quota
    except ConfigError as error:
        assert error.key == "quota" or error.key.startswith(("quota.", "quota["))
        assert str(error).startswith(f"config error: {error.key}=")
        return
    assert isinstance(result, QuotaSettings)
    # Whatever loaded can be applied, and lands on the managers exactly as configured.
    managers = result.new_managers()
    for rule in result.rules:
        assert rule.values
        for key, value in rule.values.items():
            assert value > 0 and math.isfinite(value)
            assert managers.manager(key).rules.get(rule.entity) == value


@settings(max_examples=400, deadline=None)
@given(quota=quota_sections)
def test_junk_quota_section_gives_settings_or_config_error(quota: object) -> None:
    settings_or_error(quota)


@settings(max_examples=300, deadline=None)
@given(quota=entity_sections)
def test_plausible_entities_give_settings_or_config_error(quota: object) -> None:
    settings_or_error(quota)


@settings(max_examples=200, deadline=None)
@given(entries=st.lists(good_entities, max_size=8, unique_by=lambda e: (e.get("user"), e.get("client_id"))))
def test_distinct_valid_entities_always_load_and_apply(entries: list[dict[str, object]]) -> None:
    quota = from_overrides(entities=entries)
    assert len(quota.rules) == len(entries)
    settings_or_error({"entities": entries})


@settings(max_examples=100, deadline=None)
@given(quota=quota_sections)
def test_junk_quota_section_from_a_file(tmp_path_factory: pytest.TempPathFactory, quota: object) -> None:
    path = tmp_path_factory.mktemp("junk") / "c.yaml"
    path.write_text(BASE_FILE + yaml.safe_dump({"quota": quota}))
    try:
        load_config(path)
    except ConfigError as error:
        assert error.key.startswith("quota")
