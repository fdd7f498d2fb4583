"""The `protocol:` section's settings: what the proxy lets clients use of the Kafka protocol.

`unvetted_apis: hide` (the default): ApiVersions answers offer only the API versions whose responses the
proxy has vetted (their schema is known and carries no broker address, or the proxy rewrites every address
in it), and a request for anything else closes its connection, as a broker closes one asking for an API it
does not serve. `pass`: the broker's offer goes to clients as it is, capped only where a filter must, for
an operator who must let a client use an API newer than this Sluice knows and accepts that its answers may
carry broker addresses past the proxy. Parsed by config/protocol_section.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class UnvettedApis(StrEnum):
    HIDE = "hide"
    PASS = "pass"


@dataclass(frozen=True, slots=True)
class ProtocolSettings:
    unvetted_apis: UnvettedApis = UnvettedApis.HIDE
