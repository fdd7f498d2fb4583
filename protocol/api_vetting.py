"""Which API versions the proxy lets clients use: the ones whose answers it has vetted.

A version is vetted when Kafka's message schemas define it (protocol/schema_table.py, generated from them)
and its responses either carry no broker address or carry only addresses the proxy rewrites. Anything else
would let a client learn where a broker really is and connect there, past every quota: an API newer than
the schemas the proxy knows (its answers' layout is unknown), a version that added an address no filter
rewrites (DescribeQuorum v2 lists the controllers' listeners), or an API only KRaft controllers serve.

Two kinds of Host and Port pair in the schemas are not broker addresses and are left as they are; each is
named below with the reason. Every other pair counts, wherever it nests.
"""

from __future__ import annotations

from collections.abc import Mapping

from sluice.protocol.schema_table import KNOWN_APIS

__all__ = ["NOT_BROKER_ADDRESSES", "vetted_max_versions"]

# (API name, path in its response) -> why that Host and Port are not a broker's.
NOT_BROKER_ADDRESSES: Mapping[tuple[str, str], str] = {
    ("StreamsGroupHeartbeat", "PartitionsByUserEndpoint/UserEndpoint"): (
        "the application.server endpoints of Kafka Streams instances (KIP-1071 interactive queries): "
        "the instances' own addresses, which their peers must reach as they are"
    ),
    ("StreamsGroupDescribe", "Groups/Members/UserEndpoint"): (
        "a Streams group member's application.server endpoint (KIP-1071), not a broker's"
    ),
}


def vetted_max_versions(address_rewrites: Mapping[int, int]) -> dict[int, int]:
    """Per API key, the newest version a client may be offered: every version from the schemas' lowest up
    to it is vetted. `address_rewrites` gives, per API key, the newest response version in which the proxy
    rewrites every broker address (from version 0 up).

    A key missing from the answer has no vetted version: the schemas do not know it, only controllers
    serve it, or it carries an address from its lowest version on that nothing rewrites.
    """
    vetted: dict[int, int] = {}
    for key, api in KNOWN_APIS.items():
        if not api.on_brokers:
            continue
        low, newest = api.versions
        rewritten = address_rewrites.get(key, -1)
        for path, first, last in api.addresses:
            if (api.name, path) in NOT_BROKER_ADDRESSES or last <= rewritten:
                continue
            newest = min(newest, max(first, rewritten + 1) - 1)
        if newest >= low:
            vetted[key] = newest
    return vetted
