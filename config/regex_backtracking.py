"""Does a regular expression backtrack exponentially? A check made when a pattern is configured.

Python's `re`, like Java's, is a backtracking matcher: when a match fails it tries every other way the
pattern could have matched the text so far. A pattern that can match one text in exponentially many ways
(`(a+)+`, `(a|a)*`, `(\\w|\\d)+`) then takes time exponential in the text's length on a text that fails
at its end, and nothing can interrupt it: one certificate name of 30 characters held the event loop for
seconds. Such a pattern is refused where it is configured.

How: the pattern is parsed (`re._parser`, the parser `re.compile` itself uses) and turned into its
position automaton (Glushkov's construction: one state per character position), keeping count of the
distinct ways the matcher can go from one position to the next (through loop exits and re-entries, empty
alternatives, optional parts; `(a+)+` goes from `a` to `a` in two ways, so it counts 2). A backtracking
matcher explores every path of that automaton, so it backtracks exponentially exactly when the automaton
is exponentially ambiguous: some state has two different cycles reading the same text. That is decided
on the product of the automaton with itself (Allauzen, Mohri and Rastogi, "General algorithms for
testing the ambiguity of finite automata", 2008): a diagonal state (q, q) sharing a strongly connected
component with a pair of different states, or with a pair of different parallel transitions.

What it does not refuse: polynomial backtracking (`.*.*=`, or Kafka's own documented example with six
`(.*?)` groups), which costs a power of the text's length, not an exponential; a certificate name is a
few hundred characters. Where the check cannot be exact it errs towards refusing: Unicode classes
(\\d, \\w, \\s) are taken to hold every non-ASCII character, a bounded repeat `{2,5}` counts as a loop,
a back-reference as `.*`, and a lookaround is checked as a pattern of its own. A pattern too large to
check (more than MAX_STEPS steps through the product) is refused as such.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from re import _constants as c  # type: ignore[attr-defined]  # typeshed types only the deprecated sre_constants
from re import _parser  # type: ignore[attr-defined]  # typeshed types only the deprecated sre_parse

from sluice.config.regex_charsets import ANY_CHAR, Ranges, char_ranges, class_ranges, complement, meet

__all__ = ["MAX_STEPS", "TooComplex", "exponential_backtracking"]

MAX_STEPS = 1_000_000  # about a second of this check, for a pattern hundreds of times a mapping rule's size
_LOOPS = (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT)


class TooComplex(ValueError):
    """The pattern is too large to check."""


def exponential_backtracking(pattern: str, flags: int = 0) -> str | None:
    """None when `pattern` cannot backtrack exponentially; else which part of it can (for an error
    message). Raises re.error for a pattern that does not compile, TooComplex for one too large to check."""
    tree = _parser.parse(pattern, flags)
    checks = [tree]
    while checks:
        found, lookarounds = _Automaton(tree.state.flags).ambiguous_part(checks.pop())
        if found is not None:
            return found
        checks.extend(lookarounds)
    return None


def _cap(n: int) -> int:
    return n if n < 2 else 2  # only "one way" or "more than one" matters


def _add(into: dict[int, int], items: dict[int, int], times: int = 1) -> None:
    for key, n in items.items():
        into[key] = _cap(into.get(key, 0) + n * times)


class _Fragment:
    """What a part of the pattern contributes: how many ways it matches the empty text, and with how many
    ways each position can be its first and its last character."""

    __slots__ = ("first", "last", "null")

    def __init__(self, null: int, first: dict[int, int], last: dict[int, int]) -> None:
        self.null, self.first, self.last = null, first, last


class _Automaton:
    def __init__(self, flags: int) -> None:
        self._ignore_case = bool(flags & re.IGNORECASE)
        self._ascii = bool(flags & re.ASCII)
        self.labels: list[Ranges] = []
        self.names: list[str] = []
        # follow[p][r]: how many distinct ways the matcher goes on from position p to position r.
        self.follow: defaultdict[int, dict[int, int]] = defaultdict(dict)
        self.lookarounds: list[Iterable[tuple[object, object]]] = []

    def ambiguous_part(
        self, tree: Iterable[tuple[object, object]]
    ) -> tuple[str | None, list[Iterable[tuple[object, object]]]]:
        whole = self._sequence(tree)
        start = len(self.labels)  # a state before the first character
        self.labels.append(())
        self.names.append("^")
        self.follow[start] = dict(whole.first)
        return self._search(start), self.lookarounds

    # ---- the position automaton -----------------------------------------------------------------

    def _position(self, ranges: Ranges, name: str) -> _Fragment:
        index = len(self.labels)
        self.labels.append(ranges)
        self.names.append(name)
        return _Fragment(0, {index: 1}, {index: 1})

    def _link(self, last: dict[int, int], first: dict[int, int]) -> None:
        for p, ways_out in last.items():
            follow = self.follow[p]
            for r, ways_in in first.items():
                follow[r] = _cap(follow.get(r, 0) + ways_out * ways_in)

    def _sequence(self, items: Iterable[tuple[object, object]]) -> _Fragment:
        result = _Fragment(1, {}, {})
        for op, arg in items:
            part = self._node(op, arg)
            self._link(result.last, part.first)
            first = dict(result.first)
            _add(first, part.first, result.null)
            last = dict(part.last)
            _add(last, result.last, part.null)
            result = _Fragment(_cap(result.null * part.null), first, last)
        return result

    def _node(self, op: object, arg: object) -> _Fragment:
        if op is c.LITERAL:
            assert isinstance(arg, int)  # a code point
            return self._position(char_ranges(arg, self._ignore_case), repr(chr(arg)))
        if op is c.NOT_LITERAL:
            assert isinstance(arg, int)
            # A superset: the complement of one character, but every non-ASCII one when case is ignored.
            ranges = char_ranges(arg, self._ignore_case)
            return self._position(ANY_CHAR if len(ranges) > 1 else complement(ranges), f"[^{chr(arg)}]")
        if op is c.ANY:
            return self._position(ANY_CHAR, ".")
        if op is c.IN:
            assert isinstance(arg, list)  # of (operation, argument) pairs
            ranges = class_ranges(arg, self._ignore_case, self._ascii)
            return self._position(ranges, "a character class")
        # The other operations' arguments are tuples (whose items the parser leaves untyped).
        if op is c.SUBPATTERN:
            assert isinstance(arg, tuple)
            _group, add_flags, del_flags, body = arg
            ignore_case = self._ignore_case
            scoped = (ignore_case or add_flags & re.IGNORECASE) and not del_flags & re.IGNORECASE
            self._ignore_case = bool(scoped)
            try:
                return self._sequence(body)
            finally:
                self._ignore_case = ignore_case
        if op is c.ATOMIC_GROUP:
            assert isinstance(arg, _parser.SubPattern)
            return self._sequence(arg)
        if op is c.BRANCH:
            assert isinstance(arg, tuple)
            result = _Fragment(0, {}, {})
            for alternative in arg[1]:
                part = self._sequence(alternative)
                result.null = _cap(result.null + part.null)
                _add(result.first, part.first)
                _add(result.last, part.last)
            return result
        if op in _LOOPS:
            assert isinstance(arg, tuple)
            return self._repeat(*arg)
        if op is c.GROUPREF_EXISTS:
            assert isinstance(arg, tuple)
            _group, yes, no = arg
            return self._node(c.BRANCH, (None, [yes, no or []]))
        if op is c.GROUPREF:  # the text a group matched: any text, as far as this check can tell
            return self._repeat(0, c.MAXREPEAT, [(c.ANY, None)])
        if op in (c.ASSERT, c.ASSERT_NOT):
            assert isinstance(arg, tuple)
            self.lookarounds.append(arg[1])
        return _Fragment(1, {}, {})  # anchors and lookarounds read no character

    def _repeat(self, low: int, high: int, body: Iterable[tuple[object, object]]) -> _Fragment:
        if high == 0:
            return _Fragment(1, {}, {})
        part = self._sequence(body)
        if high == 1:
            return _Fragment(_cap(part.null + (low == 0)), part.first, part.last)
        # Another round after the last character of one: the matcher's loop back. (A round that reads
        # nothing does not loop: re stops there, so the body's empty matches add no way of looping.)
        self._link(part.last, part.first)
        return _Fragment(1 if low == 0 else part.null, part.first, part.last)

    # ---- characters ---------------------------------------------------------------------------------

    # ---- the ambiguity test -----------------------------------------------------------------------

    def _search(self, start: int) -> str | None:
        """The first position of a cycle that reads one text in two ways, or None."""
        states = len(self.labels)
        labels = self.labels
        meets: dict[tuple[int, int], bool] = {}
        follow = [self.follow.get(p, {}) for p in range(states)]
        reachable = {start}
        stack = [start]
        while stack:
            for r in follow[stack.pop()]:
                if r not in reachable:
                    reachable.add(r)
                    stack.append(r)
        edges: dict[tuple[int, int], list[tuple[int, int]]] = {}
        # Steps between diagonal pairs that the matcher can take in two ways (parallel transitions).
        doubled: list[tuple[tuple[int, int], tuple[int, int]]] = []
        pairs = [(q, q) for q in reachable]
        seen = set(pairs)
        steps = 0
        while pairs:
            pair = pairs.pop()
            a, b = pair
            out = edges[pair] = []
            follow_b = follow[b]
            steps += len(follow[a]) * len(follow_b)
            if steps > MAX_STEPS:
                raise TooComplex(f"more than {MAX_STEPS} steps to check")
            for ra, ways_a in follow[a].items():
                for rb in follow_b:
                    shared = meets.get((ra, rb))
                    if shared is None:
                        shared = meets[ra, rb] = meet(labels[ra], labels[rb])
                    if not shared:
                        continue
                    nxt = (ra, rb)
                    out.append(nxt)
                    if a == b and ra == rb and ways_a > 1:
                        doubled.append((pair, nxt))
                    if nxt not in seen:
                        seen.add(nxt)
                        pairs.append(nxt)
        for component in _components(edges):
            diagonal = [a for a, b in component if a == b]
            twice = any(here in component and there in component for here, there in doubled)
            if diagonal and (len(diagonal) < len(component) or twice):
                return self.names[min(diagonal)]
        return None


def _components(edges: dict[tuple[int, int], list[tuple[int, int]]]) -> list[set[tuple[int, int]]]:
    """Strongly connected components with more than one node or a self-loop (Tarjan's, iteratively)."""
    index: dict[tuple[int, int], int] = {}
    low: dict[tuple[int, int], int] = {}
    on_stack: set[tuple[int, int]] = set()
    stack: list[tuple[int, int]] = []
    found: list[set[tuple[int, int]]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges.get(root, ())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, ()))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges.get(node, ()):
                    found.append(component)
    return found
