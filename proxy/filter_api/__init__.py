"""The filter API: what a filter and the data path that runs it agree on, owned by neither. A filter
implements `Filter` and `FilterFactory`, sees its connection as `ConnectionInfo` and returns effects
(`Forward`, `Answer`, `Close`, `Defer`, `Respond`); the data path runs the chain and carries the effects out.
The helpers both sides use (the entity gate, the topic cache) import this, not the filters."""

from .contract import (
    Answer,
    ChainVersions,
    Close,
    ConnectionInfo,
    Defer,
    EntryKind,
    Filter,
    FilterFactory,
    Forward,
    Frame,
    InFlight,
    RawExchange,
    RequestEffect,
    RequestFrame,
    Respond,
    ResponseEffect,
)

__all__ = [
    "Answer",
    "ChainVersions",
    "Close",
    "ConnectionInfo",
    "Defer",
    "EntryKind",
    "Filter",
    "FilterFactory",
    "Forward",
    "Frame",
    "InFlight",
    "RawExchange",
    "RequestEffect",
    "RequestFrame",
    "Respond",
    "ResponseEffect",
]
