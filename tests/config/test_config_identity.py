"""The tls, sasl and quota.mutations sections: defaults, values, and errors that name the key."""

from __future__ import annotations

import pytest

from sluice.config.errors import ConfigError
from sluice.config.load import config_from_mapping
from sluice.config.quota_settings import ValidateOnly

BASE = {"listen": "127.0.0.1:9092", "upstream": {"bootstrap": "127.0.0.1:19092"}}


def load(**sections: object):
    return config_from_mapping({**BASE, **sections})


def error(**sections: object) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load(**sections)
    return caught.value


def test_defaults_are_plaintext_whole_dn_and_sub_claim():
    config = load()
    assert config.tls.listener is None and config.tls.upstream is None
    assert config.tls.principal_mapping_rules.apply("CN=a,O=b") == "CN=a,O=b"
    assert config.sasl.oauthbearer_principal_claim == "sub"
    assert config.quota.mutations.validate_only is ValidateOnly.EXEMPT
    assert config.quota.mutations.num_partitions is None


def test_every_key_is_read():
    config = load(
        tls={
            "listener": {"cert": "/c.pem", "key": "/k.pem", "client_ca": "/ca.pem"},
            "upstream": {"enabled": True, "ca": "/kca.pem", "server_hostname": "kafka", "verify": False},
            "principal_mapping_rules": "RULE:^CN=(.*?),.*$/$1/U,DEFAULT",
        },
        sasl={"oauthbearer": {"principal_claim": "email"}},
        quota={"mutations": {"validate_only": "charge", "num_partitions": 6}},
    )
    listener, upstream = config.tls.listener, config.tls.upstream
    assert (listener.cert, listener.key, listener.client_ca) == ("/c.pem", "/k.pem", "/ca.pem")
    assert (upstream.ca, upstream.server_hostname, upstream.verify) == ("/kca.pem", "kafka", False)
    assert config.tls.principal_mapping_rules.apply("CN=alice,O=x") == "ALICE"
    assert config.sasl.oauthbearer_principal_claim == "email"
    assert config.quota.mutations.validate_only is ValidateOnly.CHARGE
    assert config.quota.mutations.num_partitions == 6


def test_upstream_tls_off_unless_enabled():
    assert load(tls={"upstream": {"enabled": False, "ca": "/kca.pem"}}).tls.upstream is None
    assert load(tls={"upstream": {}}).tls.upstream is None


@pytest.mark.parametrize(
    ("sections", "key", "expected"),
    [
        ({"tls": {"listener": {"cert": "/c.pem"}}}, "tls.listener.key", "TLS needs both cert and key"),
        ({"tls": {"listener": {"cert": "", "key": "/k"}}}, "tls.listener.cert", "a file path"),
        ({"tls": {"listner": {}}}, "tls.listner", "did you mean 'listener'"),
        ({"tls": {"upstream": {"enabled": "yes please"}}}, "tls.upstream.enabled", "true or false"),
        ({"tls": {"upstream": {"ca": "/kca.pem"}}}, "tls.upstream.enabled", "tls.upstream.ca is set"),
        ({"tls": {"upstream": {"enabled": True, "verify": 1}}}, "tls.upstream.verify", "true or false"),
        ({"tls": {"principal_mapping_rules": "RULE:^CN=(.*$"}}, "tls.principal_mapping_rules", "syntax"),
        ({"tls": {"principal_mapping_rules": 5}}, "tls.principal_mapping_rules", "a string or a list"),
        ({"tls": {"principal_mapping_rules": []}}, "tls.principal_mapping_rules", "at least one rule"),
        ({"sasl": {"oauthbearer": {"principal_claim": ""}}}, "sasl.oauthbearer.principal_claim", "claim"),
        ({"sasl": {"plain": {}}}, "sasl.plain", "known key"),
        ({"quota": {"mutations": {"validate_only": "maybe"}}}, "quota.mutations.validate_only", "exempt"),
        ({"quota": {"mutations": {"num_partitions": 0}}}, "quota.mutations.num_partitions", "an integer"),
    ],
)
def test_errors_name_the_key_and_what_was_expected(sections, key, expected):
    caught = error(**sections)
    assert caught.key == key
    assert expected in str(caught)
