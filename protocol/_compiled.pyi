# The compiled readers (protocol/_compiled.c); protocol/compiled.py says what each is and takes.
from collections.abc import Callable, Mapping

from sluice.protocol.metadata_brokers import AddressMap
from sluice.protocol.primitives import Buffer
from sluice.protocol.request_header import RequestHeader

def produce_responses_end(api_version: int, body: Buffer, start: int, /) -> int: ...
def fetch_responses(
    api_version: int, body: Buffer, start: int, topics_wanted: bool, /
) -> tuple[list[tuple[str | bytes, int]], int]: ...
def fetch_answer_topics(
    api_version: int, body: Buffer, start: int, /
) -> tuple[list[tuple[str | bytes, int]], int]: ...
def walk_produce_body(
    api_version: int, body: Buffer, start: int = 0, /
) -> tuple[int, int, list[tuple[str | bytes, int]], list[list[tuple[int, int]]]]: ...
def produce_topic_bytes(
    api_version: int, body: Buffer, start: int = 0, /
) -> list[tuple[str | bytes, int]]: ...
def bind_request_headers(
    header_type: type[RequestHeader],
    flexible_from: tuple[int, ...],
    not_flexible: int,
    controlled_shutdown: int,
    client_id_cache: dict[bytes, str],
    decode_client_id: Callable[[bytes], str],
    /,
) -> None: ...
def parse_request_header(frame: Buffer, /) -> RequestHeader: ...
def bind_node_endpoints(
    versions: Mapping[int, tuple[int, int]],
    walks_globals: dict[str, object],
    reference: Callable[..., object],
    /,
) -> None: ...
def rewrite_node_endpoints(
    api_key: int,
    api_version: int,
    body: Buffer,
    address_for: AddressMap,
    start: int = 0,
    remember: bool = False,
) -> tuple[bytes | None, int]: ...
def bind_produce_acks(
    first_transactional: int,
    first_flexible: int,
    reference: Callable[..., int],
    /,
) -> None: ...
def produce_acks(frame: Buffer, header: RequestHeader) -> int: ...
def bind_response_headers(api_versions_key: int, reference: Callable[..., int], /) -> None: ...
def response_header_size(api_key: int, api_version: int, frame: Buffer) -> int: ...
def bind_produce_topics(
    stream_globals: dict[str, object],
    produce_max: int,
    reference: Callable[..., list[tuple[str | bytes, int]]],
    /,
) -> None: ...
def produce_topics(frame: Buffer, header: RequestHeader) -> list[tuple[str | bytes, int]]: ...
def bind_whole_frames(reference: Callable[..., tuple[int, int | None]], /) -> None: ...
def whole_frames(
    view: memoryview, pos: int, min_payload: int, max_frame: int, frames: list[memoryview]
) -> tuple[int, int | None]: ...
def buffer_in_use(buffer: bytearray, /) -> bool: ...
def bind_walked_fetch_topics(
    walks_globals: dict[str, object], reference: Callable[..., list[tuple[str | bytes, int]] | None], /
) -> None: ...
def walked_fetch_topics(
    api_version: int, body: Buffer, start: int, /
) -> list[tuple[str | bytes, int]] | None: ...
