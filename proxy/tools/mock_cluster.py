"""The test broker: librdkafka's mock Kafka cluster, run as its own process.

The mock cluster ships inside the confluent-kafka wheel (librdkafka 2.16). We load that shared library with
ctypes and drive librdkafka's public (experimental) mock API: a producer handle created with
``test.mock.num.brokers=N`` owns the cluster, ``rd_kafka_handle_mock_cluster`` returns it, and
``rd_kafka_mock_*`` calls create topics and inject faults.

Usage::

    sluice mock-cluster --brokers 3 --topic orders:6 --topic audit:1:3 [--port-base 19090] [--ready-file PATH]

It runs until SIGTERM or SIGINT, so it can be started in the background (``&``, a supervisor, stdin closed).

* stdout carries exactly one line ``BOOTSTRAP 127.0.0.1:p1,127.0.0.1:p2,...`` once the brokers listen;
  nothing is written to stdout before it. ``--ready-file PATH`` also writes that bootstrap list (alone, one
  line) to PATH at the same moment, atomically. Logs (ours and librdkafka's) go to stderr.
* ``--port-base P``: broker N is reached on 127.0.0.1:P+N instead of a kernel-chosen port, so a Sluice
  configuration can name it once (relays on those ports, see ``broker_relay.py``).
* ``--commands``: read fault-injection commands from stdin, one per line, each answered by one stdout line,
  ``ok`` or ``error <reason>``; end of stdin then stops the cluster (so a parent process that dies takes
  its cluster with it)::

      down <broker_id>          close the broker's listener and every connection to it
      up <broker_id>            listen again, on the same port
      rtt <broker_id> <ms>      delay every response of that broker by <ms>
      topic <name> <partitions> [<replication>]
      leader <topic> <partition> <broker_id>   move a partition's leadership (-1: no leader)
      advertise <broker_id> <host> <port>      name host:port for the broker in every answer (Metadata,
                                               FindCoordinator, NodeEndpoints); it still listens where it did

  ``<broker_id>`` is 1..N, or -1 for every broker. Commands are only read when asked for: a mock cluster
  started in the background must not stop because its stdin is closed or is a terminal it may not read.
* SIGTERM or SIGINT (and, with ``--commands``, end of stdin) destroy the cluster and exit 0.

What the mock is, and is not (librdkafka 2.16.0; checked by tests/proxy/test_mock_cluster.py and by probes):

* Brokers bind 127.0.0.1 only: librdkafka hard-codes ``INADDR_LOOPBACK`` with a kernel-chosen port and has
  no bind option (``--port-base`` adds relays on fixed ports in front of them). Broker ids are 1..N. A
  broker that is down keeps its port bound but not listening, so clients see "connection refused" (through
  a relay: accepted, then closed), and it comes back on the same port. librdkafka listens with a backlog
  of 5; this tool raises it to 4096 (`_widen_backlogs`), so a test of thousands of connections arriving
  together measures the proxy's accept queue, not the test broker's.
* ApiVersions (v0..v2 response) advertises, as min..max: Produce 0..10, Fetch 0..16, ListOffsets 0..7,
  Metadata 0..13, OffsetCommit 0..9, OffsetFetch 0..6, FindCoordinator 0..3, JoinGroup 0..6,
  Heartbeat 0..5, LeaveGroup 0..4, SyncGroup 0..4, ApiVersions 0..2, InitProducerId 0..4,
  OffsetForLeaderEpoch 2..2, AddPartitionsToTxn 0..1, AddOffsetsToTxn 0..1, EndTxn 0..1,
  TxnOffsetCommit 0..3, ConsumerGroupHeartbeat 1..1, GetTelemetrySubscriptions 0..0, PushTelemetry 0..0,
  ShareGroupHeartbeat 1..1, ShareFetch 1..1, ShareAcknowledge 1..1.
* KIP-951: a Produce (v10) or Fetch (v16) sent to a partition's former leader is answered
  NOT_LEADER_OR_FOLLOWER with the new leader and its address (`NodeEndpoints`, the advertised one). The
  KIP-848 consumer protocol and share groups (KIP-932: ShareFetch answers carry NodeEndpoints too) work; a
  share group starts at the latest offset. ConsumerGroupDescribe and ShareGroupDescribe are not served.
* ApiVersions v3 and later get UNSUPPORTED_VERSION in a non-standard body (a one-byte array count
  followed by v0-style entries and a throttle time). librdkafka and aiokafka cope; kafka-python 3.0.12
  cannot decode it and never bootstraps unless given ``api_version=(2, 3)`` or older.
* Requests for any other API (CreateTopics, DeleteTopics, CreatePartitions, SaslHandshake,
  SaslAuthenticate, DescribeCluster, DescribeConfigs, the quota admin APIs, ...) and malformed requests
  are logged and answered by closing the connection. Topics are made here, with ``--topic`` or ``topic``.
* Metadata reports ControllerId 0, which is no broker, so admin clients waiting for a controller time out.
* Auto topic creation cannot be turned off: a Metadata request that allows it (librdkafka producers send
  one) creates the topic with 4 partitions and replication min(3, N). A Produce for an unknown topic gets
  UNKNOWN_TOPIC_OR_PARTITION (librdkafka's source; clients ask Metadata first).
* Each partition keeps at most ~5 MB (and 100 000 message sets); older batches are dropped, so tests
  that read back must stay below that.
* Placement: with replication 1, partition p lives on broker ``p % N + 1``; with more replicas the leader is
  picked at random among them. Leaders do not move when a broker goes down; ``leader`` moves one (the old
  leader then answers NOT_LEADER_OR_FOLLOWER and the partition's log moves with it).
* No authentication, no TLS, no quotas: every response carries throttle_time_ms 0.
* Producer sequence numbers are checked only for transactional producers: a batch that an idempotent
  (non-transactional) producer sends twice is appended twice, where a broker would keep one copy
  (tests/batch_log.py replays a log with a broker's rule).

Why this module is long: the ctypes bindings to librdkafka's mock API, the command loop that drives them
and the command line that starts them follow librdkafka's header together (the fixed-port relays are in
``broker_relay.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import glob
import importlib.util
import logging
import os
import re
import signal
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from sluice.config.distribution import install_hint

from .broker_relay import BrokerRelays, RelayError, relay_fixed_ports

_log = logging.getLogger("sluice.mock_cluster")

_RD_KAFKA_PRODUCER = 0
_RD_KAFKA_CONF_OK = 0
_ERRSTR_SIZE = 512
_MAX_BROKERS = 100
_MAX_PARTITIONS = 10_000
# Kafka's own rule for topic names (kafka.common.internals.Topic).
_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_COMMANDS = (
    "down ID | up ID | rtt ID MS | topic NAME PARTITIONS [REPLICATION] | leader TOPIC PARTITION ID"
    " | advertise ID HOST PORT"
)
_HOST = re.compile(r"^[A-Za-z0-9.:_-]{1,253}$")


class MockClusterError(Exception):
    """The mock cluster could not be started, or a command to it was refused."""


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication: int = 1


def parse_topic_spec(text: str) -> TopicSpec:
    """Parse ``NAME:PARTITIONS[:REPLICATION]``."""
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise MockClusterError(f"topic {text!r}: expected NAME:PARTITIONS[:REPLICATION]")
    return _topic_spec(parts[0], parts[1], parts[2] if len(parts) == 3 else "1")


def _topic_spec(name: str, partitions: str, replication: str) -> TopicSpec:
    if not _TOPIC_NAME.match(name) or name in (".", ".."):
        raise MockClusterError(f"topic name {name!r}: expected 1-249 characters of [a-zA-Z0-9._-]")
    count = _int_in_range("partitions", partitions, 1, _MAX_PARTITIONS)
    factor = _int_in_range("replication", replication, 1, _MAX_BROKERS)
    return TopicSpec(name, count, factor)


def _int_in_range(what: str, text: str, low: int, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise MockClusterError(f"{what} {text!r}: expected an integer") from None
    if not low <= value <= high:
        raise MockClusterError(f"{what} {value}: expected {low}..{high}")
    return value


def find_librdkafka() -> Path:
    """The librdkafka shared library bundled with the installed confluent-kafka wheel."""
    spec = importlib.util.find_spec("confluent_kafka")
    if spec is None or not spec.submodule_search_locations:
        raise MockClusterError(f"confluent-kafka is not installed: {install_hint('broker')}")
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    # auditwheel (Linux) puts vendored libraries next to the package, delocate (macOS) inside it.
    patterns = [
        package_dir.parent / "confluent_kafka.libs" / "librdkafka*.so*",
        package_dir / ".dylibs" / "librdkafka*.dylib",
        package_dir.parent / "confluent_kafka.libs" / "librdkafka*.dll",
    ]
    for pattern in patterns:
        matches = sorted(glob.glob(str(pattern)))
        if matches:
            return Path(matches[0])
    raise MockClusterError(f"no librdkafka shared library found near {package_dir}")


class _Librdkafka:
    """ctypes prototypes for the few librdkafka functions we call."""

    def __init__(self, path: Path) -> None:
        lib = ctypes.CDLL(str(path))
        vp, cp, i32, cint = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32, ctypes.c_int
        self._declare(lib, "rd_kafka_version_str", cp, [])
        self._declare(lib, "rd_kafka_err2str", cp, [cint])
        self._declare(lib, "rd_kafka_conf_new", vp, [])
        self._declare(lib, "rd_kafka_conf_destroy", None, [vp])
        self._declare(lib, "rd_kafka_conf_set", cint, [vp, cp, cp, cp, ctypes.c_size_t])
        self._declare(lib, "rd_kafka_new", vp, [cint, vp, cp, ctypes.c_size_t])
        self._declare(lib, "rd_kafka_destroy", None, [vp])
        self._declare(lib, "rd_kafka_handle_mock_cluster", vp, [vp])
        self._declare(lib, "rd_kafka_mock_cluster_bootstraps", cp, [vp])
        self._declare(lib, "rd_kafka_mock_topic_create", cint, [vp, cp, cint, cint])
        self._declare(lib, "rd_kafka_mock_broker_set_down", cint, [vp, i32])
        self._declare(lib, "rd_kafka_mock_broker_set_up", cint, [vp, i32])
        self._declare(lib, "rd_kafka_mock_broker_set_rtt", cint, [vp, i32, cint])
        self._declare(lib, "rd_kafka_mock_broker_set_host_port", None, [vp, i32, cp, cint])
        self._declare(lib, "rd_kafka_mock_partition_set_leader", cint, [vp, cp, i32, i32])
        self.lib = lib

    @staticmethod
    def _declare(lib: ctypes.CDLL, name: str, restype: object, argtypes: list[object]) -> None:
        try:
            function = getattr(lib, name)
        except AttributeError:
            raise MockClusterError(f"librdkafka has no {name}: too old for the mock API") from None
        function.restype = restype
        function.argtypes = argtypes

    def error_text(self, code: int) -> str:
        text: bytes = self.lib.rd_kafka_err2str(code)
        return text.decode("utf-8", "replace")


class LibrdkafkaMockCluster:
    """One mock cluster inside this process; every method blocks until librdkafka has applied it."""

    def __init__(self, brokers: int, library: Path | None = None) -> None:
        if not 1 <= brokers <= _MAX_BROKERS:
            raise MockClusterError(f"brokers {brokers}: expected 1..{_MAX_BROKERS}")
        self._rd = _Librdkafka(library or find_librdkafka())
        self.brokers = brokers
        self.version = self._rd.lib.rd_kafka_version_str().decode()
        self._rk: int | None = self._new_handle(brokers)
        self._cluster = self._rd.lib.rd_kafka_handle_mock_cluster(self._rk)
        if not self._cluster:
            self._rd.lib.rd_kafka_destroy(self._rk)
            raise MockClusterError("librdkafka created no mock cluster for test.mock.num.brokers")
        self.bootstrap = self._rd.lib.rd_kafka_mock_cluster_bootstraps(self._cluster).decode()
        _widen_backlogs({port for _host, port in self.addresses})

    def _new_handle(self, brokers: int) -> int:
        lib = self._rd.lib
        errstr = ctypes.create_string_buffer(_ERRSTR_SIZE)
        conf = lib.rd_kafka_conf_new()
        settings = {
            "test.mock.num.brokers": str(brokers),
            "client.id": "sluice-mock-cluster",
            # The owning producer never sends; keep its reconnect chatter about downed brokers quiet.
            "log.connection.close": "false",
        }
        for key, value in settings.items():
            if lib.rd_kafka_conf_set(conf, key.encode(), value.encode(), errstr, _ERRSTR_SIZE) != 0:
                lib.rd_kafka_conf_destroy(conf)
                raise MockClusterError(f"librdkafka refused {key}={value}: {errstr.value.decode()}")
        rk = lib.rd_kafka_new(_RD_KAFKA_PRODUCER, conf, errstr, _ERRSTR_SIZE)
        if not rk:
            lib.rd_kafka_conf_destroy(conf)  # rd_kafka_new only takes ownership on success
            raise MockClusterError(f"rd_kafka_new failed: {errstr.value.decode()}")
        handle: int = rk  # rd_kafka_t *, as an address
        return handle

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return parse_bootstrap(self.bootstrap)

    def create_topic(self, topic: TopicSpec) -> None:
        if topic.replication > self.brokers:
            # librdkafka would silently cap it at the broker count.
            raise MockClusterError(f"replication {topic.replication} exceeds {self.brokers} brokers")
        self._check(
            self._rd.lib.rd_kafka_mock_topic_create(
                self._cluster, topic.name.encode(), topic.partitions, topic.replication
            ),
            f"topic {topic.name}",
        )

    def broker_down(self, broker_id: int) -> None:
        self._check(self._rd.lib.rd_kafka_mock_broker_set_down(self._cluster, broker_id), "down")

    def broker_up(self, broker_id: int) -> None:
        self._check(self._rd.lib.rd_kafka_mock_broker_set_up(self._cluster, broker_id), "up")
        _widen_backlogs({port for _host, port in self.addresses})  # librdkafka listened with 5 again

    def set_rtt(self, broker_id: int, rtt_ms: int) -> None:
        self._check(self._rd.lib.rd_kafka_mock_broker_set_rtt(self._cluster, broker_id, rtt_ms), "rtt")

    def advertise(self, broker_id: int, host: str, port: int) -> None:
        """Have Metadata answers name host:port for this broker (it still listens where it did)."""
        self._rd.lib.rd_kafka_mock_broker_set_host_port(self._cluster, broker_id, host.encode(), port)

    def set_leader(self, topic: str, partition: int, broker_id: int) -> None:
        self._check(
            self._rd.lib.rd_kafka_mock_partition_set_leader(
                self._cluster, topic.encode(), partition, broker_id
            ),
            f"leader {topic} {partition}",
        )

    def close(self) -> None:
        if self._rk:
            # Destroying the owning handle destroys the mock cluster and closes every listener.
            self._rd.lib.rd_kafka_destroy(self._rk)
            self._rk = None
            self._cluster = None

    def _check(self, code: int, what: str) -> None:
        if code != 0:
            raise MockClusterError(f"{what}: {self._rd.error_text(code)}")


_WIDE_BACKLOG = 4096


def _widen_backlogs(ports: set[int]) -> None:
    """listen() again, with a larger backlog, on this process's listening sockets bound to `ports`.

    Calling listen() on a listening socket only changes its backlog. The sockets are librdkafka's; each
    is reached through a duplicate of its descriptor (found in /proc/self/fd, so Linux only).
    """
    fd_dir = Path("/proc/self/fd")
    if not fd_dir.is_dir():
        return
    for entry in fd_dir.iterdir():
        with contextlib.suppress(OSError, ValueError):
            fd = int(entry.name)
            if not os.readlink(entry).startswith("socket:"):
                continue
            dup = socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM)
            with dup:
                if dup.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) and dup.getsockname()[1] in ports:
                    dup.listen(_WIDE_BACKLOG)


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    addresses = []
    for item in bootstrap.split(","):
        host, _, port = item.rpartition(":")
        addresses.append((host, int(port)))
    return addresses


def apply_command(cluster: LibrdkafkaMockCluster, line: str) -> None:
    """Run one stdin command; raises MockClusterError with the reason to answer."""
    words = line.split()
    if not words:
        raise MockClusterError("empty command")
    verb, args = words[0], words[1:]
    if verb in ("down", "up") and len(args) == 1:
        broker_id = _broker_id(cluster, args[0])
        (cluster.broker_down if verb == "down" else cluster.broker_up)(broker_id)
    elif verb == "rtt" and len(args) == 2:
        cluster.set_rtt(_broker_id(cluster, args[0]), _int_in_range("rtt", args[1], 0, 3_600_000))
    elif verb == "leader" and len(args) == 3:
        spec = _topic_spec(args[0], "1", "1")
        partition = _int_in_range("partition", args[1], 0, _MAX_PARTITIONS - 1)
        broker_id = _int_in_range("broker id", args[2], -1, cluster.brokers)
        cluster.set_leader(spec.name, partition, broker_id)
    elif verb == "advertise" and len(args) == 3:
        if not _HOST.match(args[1]):
            raise MockClusterError(f"host {args[1]!r}: expected a host name or address")
        broker_id = _int_in_range("broker id", args[0], 1, cluster.brokers)  # one broker: each has its own
        cluster.advertise(broker_id, args[1], _int_in_range("port", args[2], 1, 65535))
    elif verb == "topic" and len(args) in (2, 3):
        cluster.create_topic(_topic_spec(args[0], args[1], args[2] if len(args) == 3 else "1"))
    else:
        raise MockClusterError(f"unknown command {line.strip()!r}: expected {_COMMANDS}")


def _broker_id(cluster: LibrdkafkaMockCluster, text: str) -> int:
    broker_id = _int_in_range("broker id", text, -1, cluster.brokers)
    if broker_id == 0:
        raise MockClusterError(f"broker id 0: expected 1..{cluster.brokers} or -1 for all")
    return broker_id


class _StopRequested(Exception):
    pass


def _raise_stop(signum: int, _frame: FrameType | None) -> None:
    raise _StopRequested(signal.Signals(signum).name)


def _write_ready_file(path: Path, bootstrap: str) -> None:
    # Write then rename so a watcher never reads a half-written file.
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(bootstrap + "\n")
    os.replace(partial, path)


def _answer(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _serve_commands(cluster: LibrdkafkaMockCluster) -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            apply_command(cluster, line)
        except MockClusterError as exc:
            _log.info("command %r refused: %s", line.strip(), exc)
            _answer(f"error {exc}")
        else:
            _log.info("command %r applied", line.strip())
            _answer("ok")
    _log.info("stdin closed, stopping")


def _wait_for_signal() -> None:
    while True:
        signal.pause()


def _start_with_signals_blocked(brokers: int) -> LibrdkafkaMockCluster:
    # librdkafka's mock thread does not block signals itself; a SIGTERM delivered to it would never wake
    # the main thread out of read()/pause(). Threads inherit the mask, so block while they are created.
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        return LibrdkafkaMockCluster(brokers)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


DESCRIPTION = """\
Run librdkafka's mock Kafka cluster on 127.0.0.1 until SIGTERM or SIGINT (safe to start in the background).
One line `BOOTSTRAP host:port,...` on stdout when the brokers listen."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--brokers", type=int, default=3, help="number of brokers, ids 1..N")
    parser.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="NAME:PARTITIONS[:REPLICATION]",
        help="create this topic before announcing the bootstrap (repeatable); other topics are created "
        "with 4 partitions when a client first asks for them",
    )
    parser.add_argument(
        "--port-base",
        type=int,
        metavar="P",
        help="broker N on 127.0.0.1:P+N (default: ports the kernel picks, different every start)",
    )
    parser.add_argument(
        "--ready-file",
        type=Path,
        metavar="PATH",
        help="when the brokers listen, write the bootstrap list to PATH, for scripts to wait on (removed "
        "when the cluster stops)",
    )
    parser.add_argument(
        "--commands",
        action="store_true",
        help=f"read fault-injection commands from stdin ({_COMMANDS}); end of stdin then stops the cluster",
    )
    # The old spelling of the default; accepted so existing scripts keep working.
    parser.add_argument("--no-commands", action="store_true", help=argparse.SUPPRESS)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluice mock-cluster", description=DESCRIPTION)
    add_arguments(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    # Install before the cluster exists so a signal during start-up still tears it down.
    for signum in _STOP_SIGNALS:
        signal.signal(signum, _raise_stop)
    cluster: LibrdkafkaMockCluster | None = None
    relays: BrokerRelays | None = None
    try:
        topics = [parse_topic_spec(text) for text in args.topic]
        cluster = _start_with_signals_blocked(args.brokers)
        for topic in topics:
            cluster.create_topic(topic)
        bootstrap = cluster.bootstrap
        if args.port_base is not None:
            try:
                relays, bootstrap = relay_fixed_ports(
                    args.port_base, cluster.addresses, cluster.advertise, _STOP_SIGNALS
                )
            except RelayError as exc:
                raise MockClusterError(str(exc)) from None
        if args.ready_file:
            _write_ready_file(args.ready_file, bootstrap)
        _log.info(
            "librdkafka %s mock cluster with %d brokers at %s%s",
            cluster.version,
            args.brokers,
            bootstrap,
            f" (relayed to {cluster.bootstrap})" if relays else "",
        )
        _answer(f"BOOTSTRAP {bootstrap}")
        if args.commands and not args.no_commands:
            _serve_commands(cluster)
        else:
            _wait_for_signal()
    except _StopRequested as stop:
        _log.info("%s received, stopping", stop)
    except BrokenPipeError:
        _log.info("stdout closed, stopping")
    except MockClusterError as exc:
        _log.error("mock cluster: %s", exc)
        return 2
    finally:
        # A second signal must not interrupt the teardown.
        for signum in _STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)
        if relays is not None:
            relays.close()
        if cluster is not None:
            cluster.close()
        if args.ready_file:
            # A stale ready file would tell the next script that a dead cluster is ready.
            args.ready_file.unlink(missing_ok=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
