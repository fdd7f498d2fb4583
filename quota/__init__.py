"""Sluice's quota engine: Kafka's quota arithmetic, exact to the millisecond, sans-IO and clock-free.

Every function that needs time takes ``now_ms`` (integer milliseconds on any monotonic origin). The
behaviour is specified in ``docs/kafka-quotas-spec.md`` §1-§4; ``docs/quotas.md`` explains the
choices in an operator's words.

Typical use by the proxy::

    managers = QuotaManagers(QuotaConfig())
    managers.set_quota(QuotaEntity(user="alice", client_id="pump"), QuotaKey.PRODUCER_BYTE_RATE, 100_000)
    throttle_ms = managers.produce.record_and_get_throttle_ms("alice", "pump", request_size, now_ms)
"""

from sluice.quota.connection_rate import ConnectionRateQuotas, canonical_ip
from sluice.quota.entities import (
    ANONYMOUS,
    DEFAULT,
    QuotaEntity,
    QuotaRules,
    QuotaTags,
    Resolution,
    sanitize_user,
)
from sluice.quota.errors import QuotaConfigError, QuotaViolation, ThrottlingQuotaExceeded
from sluice.quota.keys import QuotaKey, SensorKind
from sluice.quota.managers import (
    NANOS_TO_PERCENTAGE_PER_SECOND,
    OVERFLOW_USER,
    ClientQuotaManager,
    ControllerMutationQuotaManager,
    OverflowReport,
    QuotaManagers,
    RequestQuotaManager,
    kip219_throttle_ms,
    pre_kip219_throttle_ms,
)
from sluice.quota.mutations import (
    ControllerMutationQuota,
    PermissiveControllerMutationQuota,
    StrictControllerMutationQuota,
    charge_topics,
    is_strict,
)
from sluice.quota.quota_config import QuotaConfig, QuotaWindow
from sluice.quota.sensor import QuotaSensor, TokenBucketQuotaSensor, WindowQuotaSensor, new_quota_sensor
from sluice.quota.throttle import (
    UNLIMITED,
    bounded_throttle_time,
    java_round,
    saturating_int32,
    throttle_time,
    to_int32,
    token_bucket_throttle_time,
)
from sluice.quota.token_bucket import TokenBucket
from sluice.quota.topic_quotas import TopicQuotas
from sluice.quota.window import SampledRate

__all__ = [
    "ANONYMOUS",
    "DEFAULT",
    "NANOS_TO_PERCENTAGE_PER_SECOND",
    "OVERFLOW_USER",
    "UNLIMITED",
    "ClientQuotaManager",
    "ConnectionRateQuotas",
    "ControllerMutationQuota",
    "ControllerMutationQuotaManager",
    "OverflowReport",
    "PermissiveControllerMutationQuota",
    "QuotaConfig",
    "QuotaConfigError",
    "QuotaEntity",
    "QuotaKey",
    "QuotaManagers",
    "QuotaRules",
    "QuotaSensor",
    "QuotaTags",
    "QuotaViolation",
    "QuotaWindow",
    "RequestQuotaManager",
    "Resolution",
    "SampledRate",
    "SensorKind",
    "StrictControllerMutationQuota",
    "ThrottlingQuotaExceeded",
    "TokenBucket",
    "TokenBucketQuotaSensor",
    "TopicQuotas",
    "WindowQuotaSensor",
    "bounded_throttle_time",
    "canonical_ip",
    "charge_topics",
    "is_strict",
    "java_round",
    "kip219_throttle_ms",
    "new_quota_sensor",
    "pre_kip219_throttle_ms",
    "sanitize_user",
    "saturating_int32",
    "throttle_time",
    "to_int32",
    "token_bucket_throttle_time",
]
