"""DescribeClientQuotas, answered sans-IO: the filter's rules and Kafka's matching (spec §7.4).

A filter is a list of components (entity type, match type, match) and a `strict` flag. Any invalid
component fails the whole request with a top-level error and no entries, in Kafka's order and words
(`ClientQuotasImage.describe`); an unknown entity type is UNSUPPORTED_VERSION, everything else
INVALID_REQUEST.

Matching an entity: with `strict`, it must have exactly as many types as the filter has components;
an EXACT or DEFAULT component needs the type with that name (None for the default); a SPECIFIED
component needs the type with any name, the default included. No components and not strict matches
everything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sluice.proxy.control_plane.client_quota_entity import (
    CLIENT_ID,
    ENTITY_TYPES,
    IP,
    USER,
    ClientQuotaEntity,
)
from sluice.proxy.control_plane.quota_admin_errors import OK, UNSUPPORTED_VERSION, ApiError, invalid
from sluice.quota import DEFAULT, QuotaConfigError
from sluice.quota.connection_rate import canonical_ip

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

# A wire component: (entity type, match type, match); protocol/'s FilterComponent fits.
Component = tuple[str, int, str | None]
QuotaMap = Mapping[ClientQuotaEntity, Mapping[str, float]]


class FilterError(Exception):
    """A filter Kafka refuses as a whole; `error` is what the answer carries."""

    def __init__(self, error: ApiError) -> None:
        super().__init__(error.message)
        self.error = error


@dataclass(frozen=True, slots=True)
class QuotaFilter:
    """A validated filter: exact names by type (None = default), required types, strictness."""

    exact: Mapping[str, str | None]
    specified: frozenset[str]
    strict: bool

    @classmethod
    def parse(cls, components: Iterable[Component], strict: bool) -> QuotaFilter:
        """Kafka's checks, in Kafka's order; raises FilterError for the first problem."""
        exact: dict[str, str | None] = {}
        specified: set[str] = set()
        for entity_type, match_type, match in components:
            if not entity_type:
                raise FilterError(invalid("Invalid empty entity type."))
            if entity_type in exact or entity_type in specified:
                raise FilterError(
                    invalid(f"Entity type {entity_type} cannot appear more than once in the filter.")
                )
            if entity_type not in ENTITY_TYPES:
                raise FilterError(ApiError(UNSUPPORTED_VERSION, f"Unsupported entity type {entity_type}"))
            if match_type == MATCH_EXACT:
                if match is None:
                    raise FilterError(
                        invalid("Request specified MATCH_TYPE_EXACT, but set match string to null.")
                    )
                exact[entity_type] = _ip_name(match) if entity_type == IP else match
            elif match_type == MATCH_DEFAULT:
                if match is not None:
                    raise FilterError(
                        invalid("Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
                    )
                exact[entity_type] = None
            elif match_type == MATCH_SPECIFIED:
                if match is not None:
                    raise FilterError(
                        invalid("Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
                    )
                specified.add(entity_type)
            else:
                raise FilterError(invalid(f"Unknown match type {match_type}"))
        used = exact.keys() | specified
        if IP in used and (USER in used or CLIENT_ID in used):
            raise FilterError(
                invalid(
                    "Invalid entity filter component combination. IP filter component should not be "
                    "used with user or clientId filter component."
                )
            )
        return cls(exact, frozenset(specified), strict)

    @property
    def selects_all(self) -> bool:
        """No component and not strict: every entity matches (Kafka's describe of the whole store)."""
        return not self.strict and not self.exact and not self.specified

    def matches(self, entity: ClientQuotaEntity) -> bool:
        names = {USER: entity.user, CLIENT_ID: entity.client_id, IP: entity.ip}
        if self.strict and sum(name is not None for name in names.values()) != len(self.exact) + len(
            self.specified
        ):
            return False
        for entity_type, wanted in self.exact.items():
            name = names[entity_type]
            if name is None or (DEFAULT if wanted is None else wanted) != name:
                return False
        return all(names[entity_type] is not None for entity_type in self.specified)


def describe_quotas(
    quotas: QuotaMap, components: Iterable[Component], strict: bool
) -> tuple[ApiError, list[tuple[ClientQuotaEntity, Mapping[str, float]]] | None]:
    """The answer to a DescribeClientQuotas: (OK, matching entities in a stable order) or (error, None)."""
    try:
        quota_filter = QuotaFilter.parse(components, strict)
    except FilterError as failure:
        return failure.error, None
    # The values are the caller's, not copies: the store's in-force map is made afresh for each describe,
    # and a describe of 10,000 entities spent a fifth of its time copying them again.
    if quota_filter.selects_all:  # a describe of the whole store: no per-entity test
        found = [(entity, values) for entity, values in quotas.items() if values]
    else:
        found = [
            (entity, values) for entity, values in quotas.items() if values and quota_filter.matches(entity)
        ]
    found.sort(key=_entity_order)
    return OK, found


def _entity_order(item: tuple[ClientQuotaEntity, Mapping[str, float]]) -> tuple[tuple[int, str], ...]:
    return item[0].sort_key()


def _ip_name(match: str) -> str:
    """Compare IP names in canonical form, as they are stored; anything else as it is (matches nothing)."""
    try:
        return canonical_ip(match)
    except QuotaConfigError:
        return match
