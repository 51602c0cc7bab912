"""A private RabbitMQ cluster that a test may crash a node of.

Three :class:`~tests.private_services.PrivateRabbitMQ` nodes named for this run only
(``gapless-ha-<hex>-1@localhost`` …: another run may hold ``rmq1@localhost`` or any port at the
same time), each on its own AMQP and distribution port, with one shared Erlang cookie and one
private epmd (never the machine's on 4369, never the shared node's name or cookie).

How it forms: ``classic_config`` peer discovery with node 1 as the one listed peer, in every
node's rabbitmq.conf. A blank node joins the first listed peer (other than itself) that answers,
so node 1, which has no peer but itself, starts alone at once, and nodes 2 and 3, started side by
side once node 1 runs, both join it as they boot. One boot per node, no ``stop_app``/
``join_cluster``/``start_app`` round (a second boot of the app on nodes 2 and 3), and no race:
nobody joins a node that is itself still booting. (Listing all three nodes everywhere costs the
first node 10 × 500 ms of retries before it starts alone, and lets two blank nodes try each
other.) A node started again later has its data directory and rejoins its cluster from there;
peer discovery only runs on a blank node.

Nodes are numbered from 1 as their names are (``node(1)``, ``stop_node(2)``,
``quorum_leader(queue)`` answers such a number), like rmq1..rmq3 of docker-compose's ``ha``
profile.

``close`` kills every node by the process group it started (their data is thrown away, so a
graceful stop would only cost time), stops the epmd and removes the temp dirs, also after a
failed test.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from bench.harness import rabbitmq_scripts
from tests.helpers import wait_until
from tests.private_services import (
    STARTUP_S,
    PrivateEpmd,
    PrivateRabbitMQ,
    RabbitStopMode,
    ServiceUnavailable,
    _serving,
    random_cookie,
)

#: The xdist group of every test on the session's cluster (``--dist loadgroup`` sends them to
#: one worker process, so one cluster serves them all).
XDIST_GROUP = "ha-rabbit-cluster"
#: How long the nodes may take to see each other as running after they are up.
FORM_S = 60.0


class PrivateRabbitCluster:
    """``size`` private RabbitMQ nodes clustered together (see the module docstring)."""

    def __init__(self, size: int = 3) -> None:
        if size < 1:
            raise ValueError("a cluster has at least one node")
        rabbitmq_scripts()  # the reason to skip names RabbitMQ before Erlang's epmd
        run = secrets.token_hex(4)
        names = [f"gapless-ha-{run}-{index}@localhost" for index in range(1, size + 1)]
        self.epmd = PrivateEpmd()
        cookie = random_cookie()
        discovery = ("cluster_formation.peer_discovery_backend = classic_config\n"
                     f"cluster_formation.classic_config.nodes.1 = {names[0]}\n")
        made: list[PrivateRabbitMQ] = []
        try:
            for name in names:
                made.append(PrivateRabbitMQ(node=name, cookie=cookie, epmd=self.epmd,
                                            config=discovery))
        except BaseException:
            for node in made:
                node.close()
            raise
        self.nodes: tuple[PrivateRabbitMQ, ...] = tuple(made)
        #: Seconds the last :meth:`start` took, from nothing to every node running clustered.
        self.start_s: float | None = None

    # -- the nodes -------------------------------------------------------------------------------

    def node(self, index: int) -> PrivateRabbitMQ:
        """Node ``index``, counted from 1."""
        if not 1 <= index <= len(self.nodes):
            raise IndexError(f"no node {index} in a cluster of {len(self.nodes)}")
        return self.nodes[index - 1]

    def index(self, node_name: str) -> int:
        """The number of the node called ``node_name`` (``gapless-ha-…-2@localhost`` → 2)."""
        for index, node in enumerate(self.nodes, 1):
            if node.node == node_name:
                return index
        raise KeyError(f"{node_name} is not a node of this cluster")

    @property
    def names(self) -> list[str]:
        return [node.node for node in self.nodes]

    @property
    def amqp_urls(self) -> list[str]:
        return [node.amqp_url for node in self.nodes]

    @property
    def amqp_url(self) -> str:
        """Every node's URL, comma-separated: the form ``GAPLESS_AMQP_URL`` takes."""
        return ",".join(self.amqp_urls)

    def up(self) -> list[int]:
        """The numbers of the nodes whose server process runs (not necessarily clustered)."""
        return [index for index, node in enumerate(self.nodes, 1)
                if node.server_pid is not None]

    # -- start and stop --------------------------------------------------------------------------

    def start(self) -> float:
        """Start node 1, then the others side by side, and wait until node 1 sees them all
        running; the seconds that took (also kept as :attr:`start_s`)."""
        started = time.monotonic()
        first, *others = self.nodes
        first.start()
        if others:
            with ThreadPoolExecutor(len(others)) as pool:
                # list(): the first failure's exception is raised here.
                list(pool.map(PrivateRabbitMQ.start, others))
        try:
            # Nodes 2.. joined node 1 as they booted: node 1's view is the whole cluster's.
            self.wait_running(len(self.nodes), via=[1])
        except AssertionError as exc:
            raise ServiceUnavailable(f"the private RabbitMQ nodes did not form one cluster: "
                                     f"{exc}\n{self.log_tails()}") from None
        self.start_s = time.monotonic() - started
        return self.start_s

    def stop_node(self, index: int, mode: RabbitStopMode = "shutdown") -> float:
        """Stop node ``index``: ``shutdown`` (graceful; the VM exits) or ``kill`` (SIGKILL of its
        process group: a crash). Its data stays; the seconds that took."""
        return self.node(index).stop(mode)

    def start_node(self, index: int) -> float:
        """Start node ``index`` again on its data and wait until every running node sees all
        the running ones in the cluster; the seconds that took."""
        started = time.monotonic()
        self.node(index).start()
        self.wait_running(len(self.up()))
        return time.monotonic() - started

    def ensure_running(self) -> None:
        """Start every node that is down (a test that failed half-way may have left one so)."""
        for index in range(1, len(self.nodes) + 1):
            if index not in self.up():
                self.start_node(index)

    def close(self) -> None:
        """Kill every node by its process group, stop the epmd and remove the temp dirs; each
        of these is tried even when another one failed."""
        with contextlib.ExitStack() as cleanup:  # callbacks run last-in first-out, each one
            cleanup.callback(self.epmd.close)
            for node in self.nodes:
                cleanup.callback(node.close)  # also stops whatever a failed kill left running
            for node in self.nodes:
                with contextlib.suppress(subprocess.SubprocessError, OSError):
                    node.stop("kill")

    # -- rabbitmqctl -----------------------------------------------------------------------------

    def ctl(self, *args: str, via: int | None = None,
            timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """``rabbitmqctl -n NODE ARGS`` against node ``via`` (default: the first that runs)."""
        if via is None:
            running = self.up()
            if not running:
                raise AssertionError("no node of the cluster is running")
            via = running[0]
        return self.node(via).ctl(*args, timeout=timeout)

    def ctl_json(self, *args: str, via: int | None = None) -> Any:
        """The decoded ``--formatter json`` answer of a rabbitmqctl command (which must
        succeed)."""
        result = self.ctl(*args, "--formatter", "json", via=via)
        if result.returncode != 0:
            raise AssertionError(f"rabbitmqctl {' '.join(args)} failed ({result.returncode}): "
                                 f"{result.stderr.strip() or result.stdout.strip()}")
        return json.loads(result.stdout)

    def cluster_status(self, via: int | None = None) -> dict[str, Any]:
        status: dict[str, Any] = self.ctl_json("cluster_status", via=via)
        return status

    def running_nodes(self, via: int | None = None) -> list[str]:
        """The nodes ``via`` sees running in its cluster (empty while it does not answer)."""
        try:
            return list(self.cluster_status(via)["running_nodes"])
        except (AssertionError, json.JSONDecodeError, subprocess.TimeoutExpired):
            return []

    def wait_running(self, count: int, *, via: list[int] | None = None,
                     timeout: float = FORM_S) -> None:
        """Wait until each node of ``via`` (default: every node that runs) sees ``count`` nodes
        of this cluster running."""
        names = set(self.names)
        viewers = self.up() if via is None else via

        def seen(viewer: int) -> bool:
            return len(names & set(self.running_nodes(viewer))) == count

        def formed() -> bool:
            # Side by side: each rabbitmqctl is an Erlang VM of its own, up to a second here.
            with ThreadPoolExecutor(len(viewers)) as pool:
                return all(pool.map(seen, viewers))

        wait_until(formed, timeout, interval=0.2,
                   message=f"{count} running nodes in the view of nodes {viewers}")

    def queues(self, via: int | None = None) -> dict[str, dict[str, Any]]:
        """Every queue of the default vhost by name: ``type``, ``leader``, ``members`` and
        ``online`` (the last three for quorum queues)."""
        rows = self.ctl_json("list_queues", "name", "type", "leader", "members", "online",
                             via=via)
        return {row["name"]: row for row in rows}

    def quorum_leader(self, queue: str, via: int | None = None) -> int:
        """The number of the node that leads quorum queue ``queue``."""
        return self.index(self.queues(via)[queue]["leader"])

    def wait_quorum_members(self, queue: str, count: int, *, online: int | None = None,
                            timeout: float = FORM_S) -> dict[str, Any]:
        """Wait until quorum queue ``queue`` has ``count`` members, ``online`` of them (default:
        all) online with a leader among them; the queue's row."""
        want_online = count if online is None else online

        def ready() -> dict[str, Any] | None:
            try:
                row = self.queues().get(queue)
            except (AssertionError, json.JSONDecodeError, subprocess.TimeoutExpired):
                return None
            if row is None or len(row.get("members") or []) != count:
                return None
            if len(row.get("online") or []) != want_online or row.get("leader") not in \
                    (row.get("online") or []):
                return None
            return row

        found: dict[str, Any] = wait_until(
            ready, timeout, interval=0.2,
            message=f"quorum queue {queue} with {count} members, {want_online} online")
        return found

    def log_tails(self, lines: int = 15) -> str:
        return "\n".join(f"--- {node.node}\n{node.log_tail(lines)}" for node in self.nodes)


def _start_and_report(cluster: PrivateRabbitCluster) -> None:
    seconds = cluster.start()
    print(f"\nprivate RabbitMQ cluster: {len(cluster.nodes)} nodes running clustered in "
          f"{seconds:.1f}s (a node may take up to {STARTUP_S:g}s)")


@pytest.fixture(scope="session")
def private_rabbit_cluster() -> Iterator[PrivateRabbitCluster]:
    """A private three-node RabbitMQ cluster, started once per session (per xdist process: mark
    the tests ``xdist_group(XDIST_GROUP)``). Tests may stop and start nodes; a test that needs
    all of them running asks for ``rabbit_cluster`` instead."""
    yield from _serving(PrivateRabbitCluster, _start_and_report)


@pytest.fixture
def rabbit_cluster(private_rabbit_cluster: PrivateRabbitCluster) -> PrivateRabbitCluster:
    """The session's cluster with every node running (a node a failed test left down is
    started again first)."""
    private_rabbit_cluster.ensure_running()
    return private_rabbit_cluster
