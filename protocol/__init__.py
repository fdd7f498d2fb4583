"""The Kafka wire format, sans-IO: frames, headers, the API table and the few messages Sluice rewrites.

Modules: errors (ProtocolError), frames (FrameSplitter), api_keys (the ApiKey enum), apis (API table),
headers (request/response headers, framing), produce (a Produce request's acks), metadata_brokers
(Metadata fast path), broker_addresses (address rewriting), api_versions_clamp, codec_quirks (the only
place that talks to kafka-python's codecs for decode/re-encode), primitives (bounds-checked readers).
"""
