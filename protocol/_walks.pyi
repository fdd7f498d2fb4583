# The compiled walks (protocol/_walks.c); protocol/compiled_walks.py says what each is.
from sluice.protocol.primitives import Buffer

def produce_responses_end(api_version: int, body: Buffer, start: int, /) -> int: ...
def fetch_responses(
    api_version: int, body: Buffer, start: int, topics_wanted: bool, /
) -> tuple[list[tuple[str | bytes, int]], int]: ...
def walk_produce_body(
    api_version: int, body: Buffer, /
) -> tuple[int, int, list[tuple[str | bytes, int]], list[list[tuple[int, int]]]]: ...
