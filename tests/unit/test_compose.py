"""docker-compose.yml and the Dockerfile, checked without Docker.

Every service command is parsed by the real ``gapless`` command tree (click ``make_context``: the
command exists, every flag exists and its value converts), every ``GAPLESS_*`` variable is a
field of :class:`gapless.settings.Settings`, every ``depends_on`` target exists with a condition
it can meet, and the image runs ``gapless`` as a non-root user.
"""

from __future__ import annotations

import re
import shlex
import tomllib
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from gapless.cli import UsageError, app
from gapless.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"

EXPECTED_SERVICES = {"postgres", "rabbitmq", "migrate", "setup", "worker", "recovery",
                     "mock-integrator", "api", "demo-publisher"}
#: Variables read outside Settings, and by whom.
NON_SETTINGS_VARIABLES = {"GAPLESS_SCHEMA_DIR"}  # gapless.migrations.schema_dir() (an override)
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
SHELLS = {"sh", "/bin/sh", "bash", "/bin/bash"}


def load_compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def services() -> dict[str, dict[str, Any]]:
    return load_compose()["services"]  # type: ignore[no-any-return]


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


@pytest.mark.parametrize("name", sorted(EXPECTED_SERVICES - {"postgres", "rabbitmq"}))
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
                assert variable in fields, f"{name}: {variable} is not a gapless setting"


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

    installs = [re.search(r"pip install (\S+)", args) for keyword, args in instructions
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
