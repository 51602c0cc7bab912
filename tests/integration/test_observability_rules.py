"""The Prometheus rules and the Grafana dashboard of deploy/, against the metrics gapless exports.

Every file parses; every metric a rule or a panel names is one the processes register (their
modules' collectors, the API's registry) or Prometheus's own ``up``; ``promtool check rules`` and
``promtool test rules`` pass where promtool is installed (Debian: ``apt-get install
prometheus``). And the rules fire on a real system: invoices parked in ERROR and a SENDING lease
gone stale (rows written with the ledger's operations), a message really dead-lettered to
``<prefix>.dead``, and a recovery process whose integrator is a dead port (its breaker opens) —
its real ``/metrics`` scraped and each rule's expression evaluated against the samples: with
promtool (the samples written as a promtool test series) where it is installed, and always with
the small evaluator below, which the rules' one shape (``selector > N`` / ``selector == N``)
allows.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.amqp.publisher import Publisher
from gapless.ledger.invoices import (
    ClaimKind,
    Draft,
    Sending,
    claim_for_sending,
    mark_error,
    upsert_draft,
)
from gapless.ledger.series import add_series
from gapless.numbers import build_series_spec
from gapless.settings import Settings
from tests.helpers import GaplessProcess, free_port, ledger, wait_until

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
GRAFANA = ROOT / "deploy" / "grafana"
RULES = PROMETHEUS / "alerts.yml"
PROMTOOL = shutil.which("promtool")
#: Series Prometheus makes itself for each scrape target.
PROMETHEUS_OWN = {"up"}
#: PromQL words that look like metric names in an expression.
PROMQL_WORDS = {"sum", "by", "rate", "count", "max", "min", "avg", "or", "and", "unless",
                "vector", "histogram_quantile", "le", "on", "ignoring", "without", "offset",
                "increase", "irate", "bool"}
#: The one shape of every rule: a selector, an operator, a number.
SIMPLE_RULE = re.compile(r"^\s*(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<matchers>[^}]*)\})?"
                         r"\s*(?P<op>>|==|<|>=|<=|!=)\s*(?P<value>-?\d+(?:\.\d+)?)\s*$")


def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"]]


def exported_names() -> set[str]:
    """Every sample name the processes can expose: the default registry once the worker's,
    recovery's and the guard's metrics modules are imported, and the API's own registry."""
    import gapless.integrator.guard
    import gapless.recovery.metrics
    import gapless.worker.metrics  # noqa: F401
    from gapless.api.observe import ApiMetrics

    names: set[str] = set()
    for registry in (REGISTRY, ApiMetrics().registry):
        for family in registry.collect():
            names.add(family.name)
            names |= {sample.name for sample in family.samples}
            # A labelled family with no child yet exposes no samples; its names still exist.
            if family.type == "counter":
                names |= {family.name + "_total", family.name + "_created"}
            if family.type == "histogram":
                names |= {family.name + suffix for suffix in ("_bucket", "_sum", "_count")}
    return names


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (identifiers outside label braces and
    strings, that are not PromQL's own words)."""
    stripped = re.sub(r"\{[^}]*\}|\"[^\"]*\"|\[[^\]]*\]", " ", expr)
    # Label lists of aggregations and vector matching: `by (tenant, series)`.
    stripped = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ",
                      stripped)
    words = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", stripped))
    return {word for word in words if word not in PROMQL_WORDS}


def dashboard_exprs() -> list[str]:
    exprs = []
    for path in sorted((GRAFANA / "dashboards").glob("*.json")):
        dashboard = json.loads(path.read_text(encoding="utf-8"))
        for panel in dashboard["panels"]:
            exprs += [target["expr"] for target in panel["targets"]]
    return exprs


# ------------------------------------------------------------------------------ the files


def test_every_file_parses() -> None:
    for path in [*PROMETHEUS.glob("*.yml"), *GRAFANA.rglob("*.yml")]:
        assert isinstance(yaml.safe_load(path.read_text(encoding="utf-8")), dict), path
    dashboards = list((GRAFANA / "dashboards").glob("*.json"))
    assert dashboards
    for path in dashboards:
        dashboard = json.loads(path.read_text(encoding="utf-8"))
        assert dashboard["panels"], path
        ids = [panel["id"] for panel in dashboard["panels"]]
        assert len(set(ids)) == len(ids), f"{path}: panel ids repeat"


def test_every_metric_named_by_a_rule_or_a_panel_is_exported() -> None:
    exported = exported_names() | PROMETHEUS_OWN
    exprs = [rule["expr"] for rule in rules()] + dashboard_exprs()
    assert exprs
    for expr in exprs:
        named = metric_names(expr)
        assert named, expr
        assert named <= exported, f"{expr}: not exported: {sorted(named - exported)}"


def test_every_rule_has_the_simple_shape_a_severity_and_a_summary() -> None:
    names = [rule["alert"] for rule in rules()]
    assert len(set(names)) == len(names)
    for rule in rules():
        assert SIMPLE_RULE.match(rule["expr"]), rule["expr"]
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"]


def test_the_rules_cover_what_an_operator_acts_on() -> None:
    read = {name for rule in rules() for name in metric_names(rule["expr"])}
    assert read >= {"gapless_errors_awaiting_operator", "gapless_dead_letters",
                    "gapless_breaker_state", "gapless_oldest_sending_age_seconds",
                    "gapless_gib_refused", "gapless_alarms", "up"}
    jobs = set(re.findall(r'job="([^"]+)"', " ".join(rule["expr"] for rule in rules())))
    scraped = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text(encoding="utf-8"))
    assert jobs == {"gapless-worker", "gapless-recovery"}
    assert jobs <= {job["job_name"] for job in scraped["scrape_configs"]}


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed "
                                              "(Debian: apt-get install prometheus)")
def test_promtool_checks_the_rules_and_runs_their_unit_tests() -> None:
    assert PROMTOOL is not None
    for argv in ([PROMTOOL, "check", "rules", "alerts.yml"],
                 [PROMTOOL, "test", "rules", "alerts.test.yml"],
                 [PROMTOOL, "check", "config", "--syntax-only", "prometheus.yml"]):
        result = subprocess.run(argv, cwd=PROMETHEUS, capture_output=True, text=True,
                                timeout=60, check=False)
        assert result.returncode == 0, f"{' '.join(argv)}\n{result.stdout}\n{result.stderr}"


# ----------------------------------------------------------------- the rules on a real system


async def claim(engine: AsyncEngine, invoice_id: str) -> Sending:
    await upsert_draft(ledger(engine), Draft(invoice_id, "acme", "ABC", 1, {"lines": []}))
    got = await claim_for_sending(ledger(engine), invoice_id, tenant="acme", lease_s=300,
                                  lock_timeout_ms=10_000)
    assert got.kind is ClaimKind.SEND
    assert got.sending is not None
    return got.sending


async def drive_states(engine: AsyncEngine, settings: Settings) -> None:
    """acme/ABC: one ERROR parked for an operator, one ERROR due for a retry (recovery takes it
    to a dead integrator: the breaker opens), one SENDING whose lease began 20 minutes ago; one
    message in ``<prefix>.dead``."""
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("acme", "ABC"))
    parked = await claim(engine, "parked-1")
    assert await mark_error(ledger(engine), parked, "integrator timed out", None)
    due = await claim(engine, "due-1")
    assert await mark_error(ledger(engine), due, "integrator timed out",
                            datetime.now(UTC) - timedelta(seconds=1))
    stale = await claim(engine, "stale-1")
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE invoices SET sending_since = now() - interval '20 min' "
                                "WHERE id = :pk"), {"pk": stale.pk})
    async with Publisher(settings) as publisher:
        await publisher.dead_letter(b"not json", reason="observability test")


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Samples by name from a Prometheus text exposition."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(httpx.get(url, timeout=5).text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return found


def evaluate(expr: str, samples: dict[str, list[tuple[dict[str, str], float]]]
             ) -> list[dict[str, str]]:
    """The label sets for which a ``selector op number`` expression holds."""
    match = SIMPLE_RULE.match(expr)
    assert match, expr
    wanted = dict(re.findall(r'(\w+)="([^"]*)"', match["matchers"] or ""))
    compare = {">": float.__gt__, "==": float.__eq__, "<": float.__lt__, ">=": float.__ge__,
               "<=": float.__le__, "!=": float.__ne__}[match["op"]]
    threshold = float(match["value"])
    return [labels for labels, value in samples.get(match["name"], [])
            if all(labels.get(key) == value for key, value in wanted.items())
            and compare(float(value), threshold)]


def promtool_firing(samples: dict[str, list[tuple[dict[str, str], float]]], tmp: Path,
                    expected: dict[str, list[dict[str, str]]]) -> subprocess.CompletedProcess[str]:
    """promtool's verdict: the scraped samples held for 10 minutes as a test series, the rules
    (annotations dropped: their text is tested in alerts.test.yml) evaluated after them, and
    ``expected`` the alerts that must be firing — no more, no fewer."""
    assert PROMTOOL is not None
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    for group in document["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp / "rules.yml").write_text(yaml.safe_dump(document), encoding="utf-8")
    series = []
    for name, values in samples.items():
        for labels, value in values:
            matchers = ",".join(f'{key}="{val}"' for key, val in sorted(labels.items()))
            series.append({"series": f"{name}{{{matchers}}}", "values": f"{value:g}+0x10"})
    tests = []
    severity = {rule["alert"]: rule["labels"] for rule in rules()}
    for alert, own in severity.items():
        tests.append({"eval_time": "10m", "alertname": alert, "exp_alerts": [
            {"exp_labels": {**labels, **own}} for labels in expected.get(alert, [])]})
    unit = {"rule_files": ["rules.yml"], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": tests}]}
    (tmp / "test.yml").write_text(yaml.safe_dump(unit), encoding="utf-8")
    return subprocess.run([PROMTOOL, "test", "rules", "test.yml"], cwd=tmp, capture_output=True,
                          text=True, timeout=60, check=False)


async def test_the_rules_fire_on_a_driven_system(engine: AsyncEngine, settings: Settings,
                                                 gapless_env: dict[str, str], log_dir: Path,
                                                 tmp_path: Path) -> None:
    await drive_states(engine, settings)
    port, dead_port, worker_port = free_port(), free_port(), free_port()
    env = {**gapless_env, "GAPLESS_INTEGRATOR_URL": f"http://127.0.0.1:{dead_port}",
           "GAPLESS_BREAKER_FAIL_MAX": "1", "GAPLESS_BREAKER_RESET_TIMEOUT_S": "600"}
    recovery = GaplessProcess(["recovery", "--interval", "1", "--stuck-after", "3600",
                               "--max-attempts", "5", "--metrics-port", str(port)],
                              env, log_dir, "recovery")
    url = f"http://127.0.0.1:{port}/metrics"
    instance = f"127.0.0.1:{port}"
    dead = f"{settings.queue}.dead"

    def value(samples: dict[str, list[tuple[dict[str, str], float]]], metric: str,
              **labels: str) -> float | None:
        for found, number in samples.get(metric, []):
            if all(found.get(key) == val for key, val in labels.items()):
                return number
        return None

    def driven() -> dict[str, list[tuple[dict[str, str], float]]] | None:
        assert recovery.alive(), recovery.output()[-3000:]
        try:
            samples = scrape(url)
        except httpx.HTTPError:
            return None
        ready = (value(samples, "gapless_breaker_state", name="recovery") == 2
                 and value(samples, "gapless_dead_letters", queue=dead) == 1
                 and value(samples, "gapless_errors_awaiting_operator", tenant="acme") == 1
                 and value(samples, "gapless_errors_awaiting_retry", tenant="acme") == 1)
        return samples if ready else None

    try:
        samples = wait_until(driven, 90, message="recovery to export the driven states")
    finally:
        recovery.terminate(timeout=30)
        recovery.close()
    assert isinstance(samples, dict)
    assert (value(samples, "gapless_oldest_sending_age_seconds", tenant="acme") or 0) > 1000
    # The labels Prometheus adds: the recovery target answered, the worker target (nothing
    # listens on its port) did not.
    for series in samples.values():
        for labels, _ in series:
            labels.update(job="gapless-recovery", instance=instance)
    worker_instance = f"127.0.0.1:{worker_port}"
    try:
        async with httpx.AsyncClient(timeout=2) as client:
            await client.get(f"http://{worker_instance}/metrics")
        worker_up = 1.0
    except httpx.HTTPError:
        worker_up = 0.0
    samples["up"] = [({"job": "gapless-recovery", "instance": instance}, 1.0),
                     ({"job": "gapless-worker", "instance": worker_instance}, worker_up)]

    series = {"job": "gapless-recovery", "instance": instance, "tenant": "acme",
              "series": "ABC"}
    expected = {
        "GaplessErrorsAwaitingOperator": [series],
        "GaplessDeadLetters": [{"job": "gapless-recovery", "instance": instance,
                                "queue": dead}],
        "GaplessBreakerOpen": [{"job": "gapless-recovery", "instance": instance,
                                "name": "recovery"}],
        "GaplessSendingStuck": [series],
        "GaplessWorkerDown": [{"job": "gapless-worker", "instance": worker_instance}],
    }
    # The small evaluator (always): the states held, every `for` has passed.
    firing = {rule["alert"]: evaluate(rule["expr"], samples) for rule in rules()}
    assert {alert: labels for alert, labels in firing.items() if labels} == expected
    # promtool (where installed): the same samples as a test series.
    if PROMTOOL is None:
        pytest.skip("promtool is not installed: the rules were evaluated by the small "
                    "evaluator only")
    result = promtool_firing(samples, tmp_path, expected)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
