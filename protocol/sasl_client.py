"""The client side of SASL PLAIN and SCRAM-SHA-256/512 (RFC 4616, RFC 5802), as Kafka's clients speak them.

Sans-IO: tokens in, tokens out. Used by the proxy's own Kafka client to authenticate itself.

* PLAIN: one token, `authzid NUL username NUL password` with an empty authzid (Kafka's PlainSaslServer
  accepts only an authzid equal to the username, so none is sent).
* SCRAM: the exchange and its cryptography are scramp's (`scramp.ScramClient`): client-first, the server's
  first message (its nonce must extend ours), client-final with the proof, and the server's signature
  verified, so a server that does not know the password cannot pretend to. `client_final` salts the
  password (PBKDF2, thousands of HMAC rounds): the caller runs it off the event loop.

What this module adds to scramp, to behave as Kafka's ScramSaslClient does:

* at most 16384 iterations (Kafka's maximum; scramp accepts up to ten million, which would let a hostile
  server make the proxy burn seconds of CPU per connection). The minimum, 4096, is the same in both.
* no SASLprep. Kafka's clients and brokers salt the UTF-8 bytes of the password as they are; scramp
  applies SASLprep (RFC 5802 asks for it). The two agree on every credential SASLprep leaves unchanged,
  which is every ASCII one without control characters; a credential SASLprep would change or refuse is
  refused here by name ("the password"), because the broker would otherwise answer "invalid credentials"
  for a password that is right.

Errors are SaslClientError with a message that never quotes a password, a proof or a server token
(scramp's messages name the failed check, never the input; a server's `e=` error is one of RFC 5802's
words, which scramp checks before repeating).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from sluice.protocol.errors import ProtocolError

if TYPE_CHECKING:
    from scramp import ScramException

# scramp is imported where a SCRAM exchange starts, not with this module: it (with asn1crypto) costs about
# 8 MB of resident memory that a proxy whose own client uses PLAIN, or no SASL, need not carry.

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)
SCRAM_MECHANISMS = (SCRAM_SHA_256, SCRAM_SHA_512)
MAX_ITERATIONS = 16384
_T = TypeVar("_T")


class SaslClientError(ProtocolError):
    """The exchange cannot go on: a malformed or dishonest server message. Never carries a secret.

    A ProtocolError like every other refusal of bytes a peer sent (reason `bad_sasl_server_message`)."""

    def __init__(self, message: str) -> None:
        super().__init__("bad_sasl_server_message", message)


def plain_token(username: str, password: str) -> bytes:
    return b"\0" + username.encode("utf-8") + b"\0" + password.encode("utf-8")


class ScramClient:
    """One SCRAM exchange: client_first(), server_first(msg), client_final() (slow), server_final(msg)."""

    __slots__ = ("_done", "_scramp", "mechanism")

    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None) -> None:
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        _require_unchanged_by_saslprep("username", username)
        _require_unchanged_by_saslprep("password", password)
        from scramp import ScramClient as _Scramp

        self.mechanism = mechanism
        self._scramp = _Scramp([mechanism], username, password, c_nonce=nonce)
        self._done = False

    def client_first(self) -> bytes:
        first: str = _run("client-first", self._scramp.get_client_first)
        return first.encode("utf-8")

    def server_first(self, message: bytes) -> None:
        """Read the server's first message: its nonce, the salt and the iteration count."""
        _run("server-first message", self._scramp.set_server_first, _text(message, "server-first"))
        if int(self._scramp.iterations) > MAX_ITERATIONS:
            raise SaslClientError(
                f"server-first message: more than {MAX_ITERATIONS} iterations (Kafka's maximum)"
            )

    def client_final(self) -> bytes:
        """The proof. Salts the password first (PBKDF2): call it off the event loop."""
        final: str = _run("client-final", self._scramp.get_client_final)
        return final.encode("utf-8")

    def server_final(self, message: bytes) -> None:
        """Check the server's signature; raises SaslClientError if it proves nothing."""
        _run("server-final message", self._scramp.set_server_final, _text(message, "server-final"))
        self._done = True

    @property
    def complete(self) -> bool:
        return self._done


def _require_unchanged_by_saslprep(what: str, value: str) -> None:
    from scramp import ScramException
    from scramp.utils import saslprep

    try:
        unchanged = saslprep(value) == value
    except ScramException:
        unchanged = False
    if not unchanged:
        raise SaslClientError(
            f"the {what} has characters SASLprep maps or forbids; Kafka's SCRAM does not apply SASLprep, "
            "so the proof would not match what the broker stores"
        )


def _text(message: bytes, what: str) -> str:
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslClientError(f"{what} message is not UTF-8") from None


def _run(what: str, step: Callable[..., _T], *args: str) -> _T:
    from scramp import ScramException

    try:
        return step(*args)
    except ScramException as exc:
        raise SaslClientError(f"{what}: {_reason(exc)}") from None


def _reason(exc: ScramException) -> str:
    # scramp's text names the check that failed; its server_error is the RFC 5802 word a server would
    # send back, meaningful here only when it is the server's own answer rather than scramp's default.
    text = str(exc.args[0]).rstrip(".")
    code = getattr(exc.server_error, "value", None)
    return f"{text} ({code})" if code and code != "other-error" else text
