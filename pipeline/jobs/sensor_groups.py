"""Which entities must be replayed together: those that share a quota sensor under the candidate quotas.

Kafka shares one sensor among every connection with the same metric tags (a user quota is shared by all
the user's client-ids, a client-id quota by every user of that client-id, ...). Entities linked through
any shared produce or fetch sensor form one group (union-find); an entity no candidate quota limits is a
group of its own, replayed as admitted.
"""

from __future__ import annotations

from sluice.config.quota_settings import QuotaSettings

Entity = tuple[str, "str | None"]


def sensor_groups(entities: list[Entity], settings: QuotaSettings) -> dict[Entity, str]:
    """entity -> group id (stable for the same entities and quotas)."""
    managers = settings.new_managers()
    parent: dict[object, object] = {}

    def find(node: object) -> object:
        parent.setdefault(node, node)
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    def union(a: object, b: object) -> None:
        root_a, root_b = find(a), find(b)
        if root_a != root_b:
            parent[root_b] = root_a

    for entity in entities:
        find(("entity", entity))
        for direction, manager in (("produce", managers.produce), ("fetch", managers.fetch)):
            if not manager.quotas_enabled:
                continue
            resolution = manager.resolve(*entity)
            if resolution.rule is not None:
                union(("entity", entity), ("sensor", direction, resolution.tags))
    members: dict[object, list[Entity]] = {}
    for entity in entities:
        members.setdefault(find(("entity", entity)), []).append(entity)
    ordered = sorted(members.values(), key=lambda group: min((u, c or "") for u, c in group))
    groups: dict[Entity, str] = {}
    for index, group in enumerate(ordered):
        for entity in group:
            groups[entity] = f"g{index:06d}"
    return groups
