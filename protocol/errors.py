"""The one typed error raised for malformed Kafka wire input."""

from __future__ import annotations


class ProtocolError(Exception):
    """Malformed, truncated or oversized input.

    `reason` is a short machine-friendly string ('negative_frame_length', 'frame_too_large',
    'frame_too_small', 'truncated_frame', 'bad_request_header', 'bad_response_header', ...) that the
    proxy can put in a structured log event; `detail` is free text for humans.
    """

    __slots__ = ("detail", "reason")

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
