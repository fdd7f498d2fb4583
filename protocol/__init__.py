"""The Kafka wire format, sans-IO: frames, headers, the API table and the few messages Sluice rewrites.

Modules: errors (ProtocolError), frames (FrameSplitter), headers (request/response headers, framing,
the proxy's own Metadata request), apis (API table, produce_acks), metadata_brokers (Metadata fast
path), broker_addresses (address rewriting), api_versions_clamp, codec_quirks (the only place that
talks to kafka-python's codecs for decode/re-encode), primitives (bounds-checked readers).
"""
