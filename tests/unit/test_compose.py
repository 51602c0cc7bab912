"""docker-compose.yml and the Dockerfile, checked without Docker.

Every service command is parsed by the real ``gapless`` command tree (click ``make_context``: the
command exists, every flag exists and its value converts), every ``GAPLESS_*`` variable is a
field of :class:`gapless.settings.Settings`, every ``depends_on`` target exists with a condition
it can meet, and the image runs ``gapless`` as a non-root user.

The ``ha`` profile (replicated servers) is checked for consistency: the broker nodes and database
hosts its URLs list are its own services, the RabbitMQ nodes form one cluster (one cookie, the
peer list naming each node), the primary's synchronous standby is the one the standby's script
makes, and the scripts it mounts exist and parse (``bash -n``). The ``observability`` profile's
Prometheus scrapes exactly the processes' metrics ports and Grafana gets the repository's
provisioning; every image is pinned, UIs are on loopback, and the worker's and recovery's health
checks ask the liveness route they serve. Where the ``docker compose`` plugin is installed (no
engine is needed), it validates the file too.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tomllib
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from psycopg.conninfo import conninfo_to_dict

from gapless.cli import UsageError, app
from gapless.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"

EXPECTED_SERVICES = {"postgres", "rabbitmq", "migrate", "setup", "worker", "recovery",
                     "mock-integrator", "api", "demo-publisher"}
#: The ``ha`` profile: replicated servers and the gapless processes on them.
HA_PROFILE = "ha"
HA_RABBITMQ = {"rmq1", "rmq2", "rmq3"}
HA_POSTGRES = {"pg-primary", "pg-standby"}
HA_GAPLESS = {"ha-migrate", "ha-setup", "ha-worker", "ha-recovery", "ha-api"}
HA_SERVICES = HA_RABBITMQ | HA_POSTGRES | HA_GAPLESS
#: The ``observability`` profile: Prometheus and Grafana over the default system.
OBSERVABILITY_PROFILE = "observability"
OBSERVABILITY_SERVICES = {"prometheus", "grafana"}
#: Variables read outside Settings, and by whom.
#: GAPLESS_SCHEMA_DIR: gapless.ledger.migrations.schema_dir() (an override).
NON_SETTINGS_VARIABLES = {"GAPLESS_SCHEMA_DIR"}
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
SHELLS = {"sh", "/bin/sh", "bash", "/bin/bash"}


def load_compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def services() -> dict[str, dict[str, Any]]:
    return load_compose()["services"]  # type: ignore[no-any-return]


def profile_services(profile: str | None) -> dict[str, dict[str, Any]]:
    """The services of a profile (``None``: those without one, which always run)."""
    return {name: service for name, service in services().items()
            if (profile in service.get("profiles", []) if profile else not
                service.get("profiles"))}


def runs_gapless(service: dict[str, Any]) -> bool:
    return service.get("build") is not None or str(service.get("image", "")).startswith("gapless")


def invocations(name: str, service: dict[str, Any]) -> list[list[str]]:
    """The ``gapless`` argument lists a service runs (without the leading ``gapless``)."""
    entrypoint = service.get("entrypoint")
    command = service.get("command")
    if isinstance(command, str):
        command = shlex.split(command)
    if entrypoint is None:  # the image's ENTRYPOINT ["gapless"]
        assert isinstance(command, list), f"{name}: command must be a list"
        return [[str(part) for part in command]]
    if isinstance(entrypoint, str):
        entrypoint = shlex.split(entrypoint)
    assert entrypoint[0] in SHELLS, f"{name}: entrypoint {entrypoint} is neither gapless nor sh"
    script = " ".join(str(part) for part in command)
    found = []
    for part in re.split(r"&&|;|\n", script):
        argv = shlex.split(part)
        if not argv:
            continue
        assert argv[0] == "gapless", f"{name}: {part.strip()!r} does not run gapless"
        found.append(argv[1:])
    assert found, f"{name}: the shell script runs no gapless command"
    return found


def parse_command(argv: list[str]) -> tuple[str, dict[str, Any]]:
    """Parse ``gapless <argv>`` with the real command tree, without running it.

    Returns the command path and the parsed parameters; raises the click UsageError of a
    missing command, an unknown flag or a bad value.
    """
    root = typer.main.get_command(app)
    command: Any = root
    parent = None
    path = ["gapless"]
    args = list(argv)
    while hasattr(command, "commands"):  # a group: the next word names a sub-command
        if not args:
            raise typer.BadParameter(f"{' '.join(path)} needs a sub-command")
        if args[0].startswith("-"):  # the group's own flag, e.g. `gapless --version`
            flags = {opt: param for param in command.params if getattr(param, "is_flag", False)
                     for opt in param.opts}
            if args[0] not in flags or len(args) > 1:
                raise typer.BadParameter(f"no such option: {' '.join([*path, *args])}")
            return " ".join(path), {flags[args[0]].name: True}
        name, args = args[0], args[1:]
        parent = command.make_context(" ".join(path), [name], parent=parent,
                                      resilient_parsing=True)
        sub = command.get_command(parent, name)
        if sub is None:
            raise typer.BadParameter(f"no such command: {' '.join([*path, name])}")
        command = sub
        path.append(name)
    ctx = command.make_context(" ".join(path), args, parent=parent)
    return " ".join(path), dict(ctx.params)


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = DOCKERFILE.read_text(encoding="utf-8")
    text = re.sub(r"\\\n", " ", text)
    result = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        result.append((keyword.upper(), rest.strip()))
    return result


# ----------------------------------------------------------------------------------- compose


def test_compose_has_every_service_of_the_system() -> None:
    assert set(services()) >= EXPECTED_SERVICES


def test_the_checker_refuses_bad_commands() -> None:
    """The command check itself is not vacuous: unknown commands and flags are caught."""
    assert parse_command(["worker", "--concurrency", "3"])[1]["concurrency"] == 3
    with pytest.raises(UsageError, match="No such option"):
        parse_command(["worker", "--no-such-flag"])
    with pytest.raises(UsageError, match="no such command"):
        parse_command(["no-such-command"])
    assert parse_command(["--version"]) == ("gapless", {"version": True})
    with pytest.raises(UsageError, match="no such option"):
        parse_command(["--no-such-flag"])
    with pytest.raises(UsageError, match="valid integer"):
        parse_command(["worker", "--concurrency", "many"])
    with pytest.raises(UsageError, match="greater than or equal to 1"):
        parse_command(["worker", "--concurrency", "0"])


@pytest.mark.parametrize("name", sorted((EXPECTED_SERVICES - {"postgres", "rabbitmq"})
                                         | HA_GAPLESS))
def test_every_service_command_is_a_real_gapless_command(name: str) -> None:
    service = services()[name]
    assert runs_gapless(service), f"{name} does not run the gapless image"
    for argv in invocations(name, service):
        parse_command(argv)


def test_each_process_runs_the_expected_command() -> None:
    ran = {name: [parse_command(argv)[0] for argv in invocations(name, service)]
           for name, service in services().items() if runs_gapless(service)}
    assert ran["migrate"] == ["gapless migrate"]
    assert set(ran["setup"]) == {"gapless series add"}
    assert ran["worker"] == ["gapless worker"]
    assert ran["recovery"] == ["gapless recovery"]
    assert ran["mock-integrator"] == ["gapless mock-integrator"]
    assert ran["api"] == ["gapless api"]
    assert set(ran["demo-publisher"]) == {"gapless publish"}


def test_demo_publisher_mixes_priorities_and_tenants() -> None:
    calls = [parse_command(argv)[1]
             for argv in invocations("demo-publisher", services()["demo-publisher"])]
    assert {call["priority"] for call in calls} == {"user", "batch"}
    assert len({call["tenant"] for call in calls}) == 2
    assert all(call["demo"] for call in calls)
    defined = {(call["tenant"], call["code"]) for call in
               (parse_command(argv)[1] for argv in invocations("setup", services()["setup"]))}
    assert {(call["tenant"], call["series"]) for call in calls} <= defined


def test_every_gapless_variable_is_a_setting() -> None:
    fields = {f"GAPLESS_{name.upper()}" for name in Settings.model_fields}
    for name, service in services().items():
        environment = service.get("environment") or {}
        if isinstance(environment, list):
            environment = dict(item.split("=", 1) for item in environment)
        for variable in environment:
            if variable.startswith("GAPLESS_"):
                assert variable in fields, \
                    f"{name}: {variable} is not a gapless setting"


def test_settings_values_in_compose_validate() -> None:
    """Each service's literal GAPLESS_* values are valid settings (a bad value raises)."""
    checked = 0
    for service in services().values():
        environment = service.get("environment") or {}
        values = {key[len("GAPLESS_"):].lower(): value for key, value in environment.items()
                  if key.startswith("GAPLESS_") and "${" not in str(value)}
        if values:
            settings = Settings.model_validate(values)
            assert settings.queue == values.get("queue", settings.queue)
            checked += 1
    assert checked >= 6


def test_the_api_token_has_no_default_a_server_would_refuse() -> None:
    """The API refuses a token shorter than MIN_TOKEN_LENGTH and would crash-loop on one:
    compose either requires the variable (``${VAR:?why}``) or defaults to a valid token."""
    from gapless.api.auth import MIN_TOKEN_LENGTH

    found = 0
    for name, service in services().items():
        value = str((service.get("environment") or {}).get("GAPLESS_API_TOKEN", ""))
        if not value:
            continue
        found += 1
        required = re.fullmatch(r"\$\{GAPLESS_API_TOKEN:\?.+\}", value)
        default = re.fullmatch(r"\$\{GAPLESS_API_TOKEN:-(.*)\}", value)
        literal = None if "${" in value else value
        token = default.group(1) if default else literal
        assert required or (token is not None and len(token) >= MIN_TOKEN_LENGTH), (
            f"{name}: GAPLESS_API_TOKEN {value!r} is neither required nor a valid token")
    assert found >= 2


def test_depends_on_targets_exist_and_their_conditions_can_be_met() -> None:
    all_services = services()
    for name, service in all_services.items():
        depends = service.get("depends_on") or {}
        if isinstance(depends, list):
            depends = {target: {"condition": "service_started"} for target in depends}
        for target, spec in depends.items():
            assert target in all_services, f"{name} depends on unknown service {target}"
            condition = spec.get("condition", "service_started")
            assert condition in CONDITIONS, f"{name}: unknown condition {condition}"
            if condition == "service_healthy":
                assert "healthcheck" in all_services[target], f"{target} has no healthcheck"
            if condition == "service_completed_successfully":
                assert all_services[target].get("restart", "no") == "no", \
                    f"{target} is waited for to complete, so it must be a one-shot"


def test_start_order_is_acyclic_and_workers_wait_for_the_schema() -> None:
    all_services = services()
    order: list[str] = []

    def visit(name: str, stack: tuple[str, ...]) -> None:
        assert name not in stack, f"dependency cycle: {' -> '.join((*stack, name))}"
        if name in order:
            return
        for target in all_services[name].get("depends_on") or {}:
            visit(target, (*stack, name))
        order.append(name)

    for name in all_services:
        visit(name, ())
    for process in ("worker", "recovery", "api"):
        assert all_services[process]["depends_on"]["migrate"]["condition"] == \
            "service_completed_successfully"
        assert all_services[f"ha-{process}"]["depends_on"]["ha-migrate"]["condition"] == \
            "service_completed_successfully"
    assert order.index("setup") < order.index("demo-publisher")


def test_worker_runs_two_replicas() -> None:
    assert services()["worker"]["deploy"]["replicas"] == 2


def test_rabbitmq_has_the_management_ui_and_postgres_is_15() -> None:
    all_services = services()
    assert "management" in all_services["rabbitmq"]["image"]
    assert all_services["postgres"]["image"].split(":")[1].startswith("15")
    assert "pg_isready" in " ".join(all_services["postgres"]["healthcheck"]["test"])


def test_processes_find_each_other_by_service_name() -> None:
    """The integrator and broker URLs name services of the file, on the ports they listen on."""
    all_services = services()
    environment = all_services["worker"]["environment"]
    integrator = urllib.parse.urlsplit(environment["GAPLESS_INTEGRATOR_URL"])
    _, mock = parse_command(invocations("mock-integrator", all_services["mock-integrator"])[0])
    assert integrator.hostname == "mock-integrator"
    assert integrator.port == mock["port"]
    assert mock["host"] == "0.0.0.0"
    for key in ("GAPLESS_DATABASE_URL", "GAPLESS_AMQP_URL"):
        assert urllib.parse.urlsplit(environment[key]).hostname in all_services
    _, api = parse_command(invocations("api", all_services["api"])[0])
    assert f"{api['port']}:{api['port']}" in all_services["api"]["ports"]
    assert api["host"] == "0.0.0.0"


# ------------------------------------------------------------------------------ profile ha


def ha_env() -> dict[str, str]:
    """The environment every gapless process of the ha profile shares (the worker's)."""
    return services()["ha-worker"]["environment"]  # type: ignore[no-any-return]


def test_the_ha_profile_is_a_system_of_its_own_beside_the_default_one() -> None:
    """The default services stay as they were (no profile: ``docker compose up`` runs exactly
    them), the ha profile holds its servers and processes, and nothing outside it needs them."""
    assert set(profile_services(None)) == EXPECTED_SERVICES
    assert set(profile_services(HA_PROFILE)) == HA_SERVICES
    assert set(services()) == EXPECTED_SERVICES | HA_SERVICES | OBSERVABILITY_SERVICES
    for name, service in profile_services(None).items():
        assert not set(service.get("depends_on") or {}) & HA_SERVICES, name
    # Its own volumes and host ports: both systems may run at once.
    published = [host_port(port) for service in services().values()
                 for port in service.get("ports", [])]
    assert len(set(published)) == len(published)
    volumes = [str(volume).split(":")[0] for service in services().values()
               for volume in service.get("volumes", []) if not str(volume).startswith(".")]
    assert len(set(volumes)) == len(volumes)
    assert set(volumes) == set(load_compose()["volumes"])


def test_ha_processes_share_one_environment_on_quorum_queues() -> None:
    environment = ha_env()
    for name in HA_GAPLESS:
        service = services()[name]
        assert runs_gapless(service)
        own = service["environment"]
        assert {key: own[key] for key in environment} == environment, name
    assert environment["GAPLESS_QUEUE_TYPE"] == "quorum"
    assert services()["ha-worker"]["deploy"]["replicas"] == 2


def test_ha_amqp_url_lists_every_rabbitmq_node_of_the_profile() -> None:
    all_services = services()
    urls = [urllib.parse.urlsplit(url) for url in ha_env()["GAPLESS_AMQP_URL"].split(",")]
    assert [url.hostname for url in urls] == sorted(HA_RABBITMQ)
    for url in urls:
        node = all_services[url.hostname or ""]
        assert HA_PROFILE in node["profiles"]
        assert node["image"].startswith("rabbitmq:")
        assert url.scheme == "amqp"
        assert url.port == 5672
        assert (url.username, url.password) == (node["environment"]["RABBITMQ_DEFAULT_USER"],
                                                node["environment"]["RABBITMQ_DEFAULT_PASS"])
    # A quorum queue gets a member on each node running when it is declared: the processes
    # that declare queues wait for all of them.
    for name in ("ha-worker", "ha-api"):
        for node in HA_RABBITMQ:
            assert all_services[name]["depends_on"][node]["condition"] == "service_healthy"


def test_ha_rabbitmq_nodes_form_one_cluster() -> None:
    """One cookie; each node's name (rabbit@<hostname>) is in the peer list every node reads."""
    nodes = {name: services()[name] for name in sorted(HA_RABBITMQ)}
    assert len({node["environment"]["RABBITMQ_ERLANG_COOKIE"] for node in nodes.values()}) == 1
    for name, node in nodes.items():
        assert node["hostname"] == name
        assert "healthcheck" in node
        assert any(str(volume).endswith(":/var/lib/rabbitmq") for volume in node["volumes"]), \
            f"{name} keeps its data in a volume of its own"
        configs = [mount_source(volume) for volume in node["volumes"]
                   if "/etc/rabbitmq/conf.d/" in str(volume)]
        assert len(configs) == 1, name
        conf = rabbitmq_conf(configs[0])
        assert conf["cluster_formation.peer_discovery_backend"] == "classic_config"
        peers = {value for key, value in conf.items()
                 if key.startswith("cluster_formation.classic_config.nodes.")}
        assert peers == {f"rabbit@{other}" for other in nodes}, name


def test_ha_database_url_lists_the_primary_and_the_standby_and_wants_the_writable_one() -> None:
    all_services = services()
    params = conninfo_to_dict(ha_env()["GAPLESS_DATABASE_URL"])
    assert params["target_session_attrs"] == "read-write"
    hosts = str(params["host"]).split(",")
    assert hosts == ["pg-primary", "pg-standby"]
    assert str(params["port"]).split(",") == ["5432"] * len(hosts)
    for host in hosts:
        server = all_services[host]
        assert HA_PROFILE in server["profiles"]
        assert server["image"].split(":")[1].startswith("15")
        # The URL names no password; libpq reads PGPASSWORD.
        assert ha_env()["PGPASSWORD"] == server["environment"]["POSTGRES_PASSWORD"]
    for name in ("pg-primary", "pg-standby"):
        assert all_services["ha-migrate"]["depends_on"][name]["condition"] == "service_healthy"


def test_ha_primary_commits_wait_for_the_standby_the_script_makes() -> None:
    primary = services()["pg-primary"]
    standby = services()["pg-standby"]
    settings = postgres_settings(primary["command"])
    assert settings["synchronous_commit"] == "on"
    # FIRST 1 (name): one synchronous standby, and it is the one called `name`.
    match = re.fullmatch(r"FIRST 1 \((\w+)\)", settings["synchronous_standby_names"])
    assert match, settings["synchronous_standby_names"]
    assert standby["environment"]["REPLICATION_SLOT"] == match.group(1)
    assert primary["environment"]["REPLICATION_SLOT"] == match.group(1)
    # The standby's script copies the primary with pg_basebackup -R (standby.signal and
    # primary_conninfo written), streaming from the slot under that application_name.
    script = mounted_script(standby, standby["entrypoint"][-1]).read_text(encoding="utf-8")
    assert re.search(r"pg_basebackup\b[^;]*--write-recovery-conf", script, re.DOTALL)
    assert 'application_name=$replication_slot' in script
    assert 'replication_slot="${REPLICATION_SLOT' in script
    assert standby["environment"]["PRIMARY_HOST"] == "pg-primary"
    assert standby["depends_on"]["pg-primary"]["condition"] == "service_healthy"
    # The primary's initialisation makes the replication role and slot.
    init = [mount_source(volume) for volume in primary["volumes"]
            if "/docker-entrypoint-initdb.d/" in str(volume)]
    assert len(init) == 1
    text = init[0].read_text(encoding="utf-8")
    assert "pg_create_physical_replication_slot" in text
    assert "REPLICATION" in text
    assert "host replication" in text


def test_ha_scripts_exist_and_parse() -> None:
    scripts = []
    for name, service in profile_services(HA_PROFILE).items():
        for volume in service.get("volumes", []):
            if str(volume).startswith("."):
                source = mount_source(volume)
                assert source.is_file(), f"{name} mounts {source}, which does not exist"
                if source.suffix == ".sh":
                    scripts.append(source)
    assert len(scripts) == 2
    for script in scripts:
        result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True,
                                check=False)
        assert result.returncode == 0, f"{script}: {result.stderr}"
        assert script.read_text(encoding="utf-8").startswith("#!/usr/bin/env bash\n")


def test_docker_compose_accepts_the_file_with_and_without_the_ha_profile() -> None:
    """``docker compose config`` needs the compose plugin, not an engine."""
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "compose", "version"], capture_output=True,
                                        check=False).returncode != 0:
        pytest.skip("the docker compose plugin is not installed")
    for profile in ([], ["--profile", HA_PROFILE], ["--profile", OBSERVABILITY_PROFILE]):
        result = subprocess.run([docker, "compose", "-f", str(COMPOSE), *profile, "config",
                                 "--quiet"], capture_output=True, text=True, cwd=ROOT,
                                check=False,
                                env={**os.environ, "GAPLESS_API_TOKEN": "t" * 32})
        assert result.returncode == 0, result.stderr


def host_port(mapping: str) -> int:
    """The host port of a ``[address:]host:container`` port mapping."""
    return int(str(mapping).split(":")[-2])


def mount_source(volume: str) -> Path:
    """The file a bind mount (``./path:/in/container[:ro]``) mounts."""
    return ROOT / str(volume).split(":")[0]


def mounted_script(service: dict[str, Any], path: str) -> Path:
    """The repository file a service mounts at ``path``."""
    for volume in service.get("volumes", []):
        parts = str(volume).split(":")
        if parts[1] == path:
            return ROOT / parts[0]
    raise AssertionError(f"nothing is mounted at {path}")


def rabbitmq_conf(path: Path) -> dict[str, str]:
    """``key = value`` lines of a rabbitmq.conf (sysctl format), comments dropped."""
    conf = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            key, _, value = line.partition("=")
            conf[key.strip()] = value.strip()
    return conf


def postgres_settings(command: list[str]) -> dict[str, str]:
    """The ``-c name=value`` settings of a ``postgres`` command line."""
    assert command[0] == "postgres"
    settings = {}
    for flag, value in zip(command[1::2], command[2::2], strict=True):
        assert flag == "-c"
        name, _, setting = value.partition("=")
        settings[name] = setting
    return settings


# ------------------------------------------------------------------- images, ports, health


def test_every_image_is_pinned_to_a_version() -> None:
    """No ``latest`` and no bare major version: a re-pull gets the same servers (the gapless
    image is the one built here)."""
    for name, service in services().items():
        image = str(service.get("image", ""))
        if runs_gapless(service):
            continue
        tag = image.partition(":")[2]
        assert tag not in ("", "latest"), f"{name}: {image} is not pinned"
        assert re.match(r"v?\d+\.\d+(\.\d+)?", tag), f"{name}: {image} names no minor version"


def test_published_ports_of_servers_and_uis_are_on_loopback() -> None:
    """Only the API is published on every interface (callers reach it); the management UIs,
    Prometheus and Grafana answer on the host's loopback only."""
    for name, service in services().items():
        for mapping in service.get("ports", []):
            if name in ("api", "ha-api"):
                continue
            assert str(mapping).startswith("127.0.0.1:"), f"{name}: {mapping} is not loopback"
    assert "127.0.0.1:15672:15672" in services()["rabbitmq"]["ports"]


def test_rabbitmq_keeps_its_data_in_a_volume_under_a_fixed_node_name() -> None:
    rabbitmq = services()["rabbitmq"]
    assert "rabbitmqdata:/var/lib/rabbitmq" in rabbitmq["volumes"]
    assert rabbitmq["hostname"] == "rabbitmq"


def healthcheck_url(service: dict[str, Any]) -> urllib.parse.SplitResult:
    """The URL a ``python -c "urllib.request.urlopen(...)"`` health check opens."""
    test = service["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"], test
    match = re.search(r"urlopen\('([^']+)'", test[3])
    assert match, test[3]
    return urllib.parse.urlsplit(match.group(1))


@pytest.mark.parametrize("name", ["worker", "recovery"])
def test_worker_and_recovery_health_checks_ask_the_served_liveness_route(name: str) -> None:
    """The health check opens /healthz on the port the process serves it on
    (``--metrics-port``), which gapless.observe routes."""
    from gapless.observe import LIVENESS_PATH, HealthServer

    service = services()[name]
    _, params = parse_command(invocations(name, service)[0])
    url = healthcheck_url(service)
    assert url.hostname == "127.0.0.1"
    assert url.port == params["metrics_port"]
    assert params["metrics_host"] == "0.0.0.0"  # Prometheus scrapes it from its container
    assert url.path == LIVENESS_PATH
    routes = {resource.canonical for resource in
              HealthServer("127.0.0.1", 0, liveness=[], readiness=[]).app().router.resources()}
    assert url.path in routes


def test_observability_profile_runs_prometheus_and_grafana_with_the_repository_files() -> None:
    assert set(profile_services(OBSERVABILITY_PROFILE)) == OBSERVABILITY_SERVICES
    for name, service in profile_services(None).items():
        assert not set(service.get("depends_on") or {}) & OBSERVABILITY_SERVICES, name
    prometheus = services()["prometheus"]
    config = mounted_script(prometheus, "/etc/prometheus/prometheus.yml")
    scraped = yaml.safe_load(config.read_text(encoding="utf-8"))
    for rule_file in scraped["rule_files"]:
        assert mounted_script(prometheus, rule_file).is_file()
    # Every scrape target is a service of the file on the port its process serves /metrics on.
    ports = {"api": parse_command(invocations("api", services()["api"])[0])[1]["port"]}
    for name in ("worker", "recovery"):
        ports[name] = parse_command(invocations(name, services()[name])[0])[1]["metrics_port"]
    targets = set()
    for job in scraped["scrape_configs"]:
        for static in job.get("static_configs", []):
            targets |= {tuple(target.split(":")) for target in static["targets"]}
        for dns in job.get("dns_sd_configs", []):
            targets |= {(dns_name, str(dns["port"])) for dns_name in dns["names"]}
    assert targets == {(name, str(port)) for name, port in ports.items()}
    grafana = services()["grafana"]
    provisioning = mounted_script(grafana, "/etc/grafana/provisioning")
    assert (provisioning / "datasources").is_dir()
    dashboards = yaml.safe_load((provisioning / "dashboards" / "gapless.yml").read_text(
        encoding="utf-8"))
    path = dashboards["providers"][0]["options"]["path"]
    assert any(mounted_script(grafana, path).glob("*.json"))
    datasource = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text(
        encoding="utf-8"))["datasources"][0]
    assert urllib.parse.urlsplit(datasource["url"]).hostname == "prometheus"
    assert grafana["depends_on"]["prometheus"]["condition"] == "service_healthy"


# ----------------------------------------------------------------------------------- image


def test_image_runs_gapless_as_a_non_root_user() -> None:
    instructions = dockerfile_instructions()
    assert instructions[0][0] == "FROM"
    assert re.fullmatch(r"python:3\.11-slim(\S*)?", instructions[0][1])
    entrypoints = [args for keyword, args in instructions if keyword == "ENTRYPOINT"]
    assert entrypoints
    assert yaml.safe_load(entrypoints[-1]) == ["gapless"]
    users = [(index, args) for index, (keyword, args) in enumerate(instructions)
             if keyword == "USER"]
    assert users, "the image must switch to a non-root user"
    last_index, last_user = users[-1]
    assert last_user.split(":")[0] not in {"root", "0"}
    # Nothing after the switch runs as root again, and the project is installed before it.
    install = [index for index, (keyword, args) in enumerate(instructions)
               if keyword == "RUN" and "pip install" in args]
    assert install
    assert install[-1] < last_index


def test_image_installs_the_distribution_with_its_migrations() -> None:
    """Everything the wheel is built from (pyproject's packages, the folders mapped into them
    — schema/ — and the readme) is copied into the tree that pip installs, so the migrations
    come with the package and no GAPLESS_SCHEMA_DIR work-around is needed."""
    instructions = dockerfile_instructions()
    env = {}
    for keyword, args in instructions:
        if keyword == "ENV":
            for key, value in re.findall(r"(\w+)=(\S+)", args):
                env[key] = value
    assert "GAPLESS_SCHEMA_DIR" not in env
    fields = {f"GAPLESS_{name.upper()}" for name in Settings.model_fields}
    for key in env:
        if key.startswith("GAPLESS_"):
            assert key in fields | NON_SETTINGS_VARIABLES

    installs = [re.search(r"pip install (?:-c \S+ )?(\S+)", args) for keyword, args in instructions
                if keyword == "RUN"]
    source = next(match.group(1) for match in installs if match).rstrip("/")
    copied: set[str] = set()
    for keyword, args in instructions:
        if keyword != "COPY" or args.startswith("--from"):
            continue
        *sources, dest = shlex.split(args)
        for item in sources:
            name = Path(item).name
            # A directory's contents land in `dest`, so it must name the folder itself.
            expected = {f"{source}/{name}"} | ({source} if (ROOT / item).is_file() else set())
            if dest.rstrip("/") in expected:
                copied.add(item)

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
        "tool"]["setuptools"]
    mapped = setuptools.get("package-dir", {})
    needed = {"pyproject.toml", "README.md", *mapped.values()}
    needed |= {package.split(".")[0] for package in setuptools["packages"]
               if not any(package == key or package.startswith(f"{key}.") for key in mapped)}
    assert "schema" in needed
    assert needed <= copied, f"not copied into {source}: {sorted(needed - copied)}"


def test_everything_the_image_copies_exists_and_is_not_ignored() -> None:
    ignored = {line.strip().rstrip("/") for line in
               DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
               if line.strip() and not line.startswith("#")}
    for keyword, args in dockerfile_instructions():
        if keyword != "COPY" or args.startswith("--from"):
            continue
        for source in shlex.split(args)[:-1]:
            assert (ROOT / source).exists(), f"COPY {source}: no such file in the repository"
            assert source not in ignored, f"COPY {source} is excluded by .dockerignore"
    # pyproject names README.md as the readme: the build needs it in the context.
    assert "README.md" not in ignored
