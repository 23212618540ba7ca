"""The alert rules of deploy/prometheus/ (docs/operations.md#metrics): promtool checks them and runs their unit tests
(Debian's package prometheus; skipped without it, except in CI, which installs it), the tests bite, every alert has
a test that fires it, and the rules and the scrape configuration name metrics and jobs that exist."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "prometheus"
PROMTOOL = shutil.which("promtool")


@pytest.fixture
def promtool() -> str:
    if PROMTOOL is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing in CI: .ci/run installs it (apt-get install prometheus)")
        pytest.skip("promtool not installed (apt-get install --no-install-recommends prometheus): the alert rules' "
                    "unit tests did not run")
    return PROMTOOL


def run(*args, cwd=DEPLOY) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=120)


def test_promtool_checks_the_rules_and_config_and_runs_the_rule_tests(promtool):
    checked = run(promtool, "check", "rules", "rules.yml")
    assert checked.returncode == 0 and "SUCCESS: 7 rules found" in checked.stdout, checked.stdout + checked.stderr
    config = run(promtool, "check", "config", "--syntax-only", "prometheus.yml")
    assert config.returncode == 0, config.stdout + config.stderr
    tested = run(promtool, "test", "rules", "rules_test.yml")
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


@pytest.mark.parametrize("change", [
    ("ldpmarket_budget_violations > 0", "ldpmarket_budget_violations > 1"),
    ("ldpmarket_checkpoint_lag_seconds > 1800", "ldpmarket_checkpoint_lag_seconds > 3600"),
    ("ldpmarket_stranded_purchases > 0\n        for: 5m", "ldpmarket_stranded_purchases > 0\n        for: 1m"),
    ("absent(up{job=\"ldpmarket-worker\"} == 1)", "absent(up{job=\"ldpmarket-worker\"})"),
    ("[1h:1m]", "[5m:1m]"),
])
def test_the_rule_tests_catch_a_changed_rule(promtool, tmp_path, change):
    rules = (DEPLOY / "rules.yml").read_text()
    assert rules.count(change[0]) == 1
    (tmp_path / "rules.yml").write_text(rules.replace(*change))
    shutil.copy(DEPLOY / "rules_test.yml", tmp_path / "rules_test.yml")
    tested = run(promtool, "test", "rules", "rules_test.yml", cwd=tmp_path)
    assert tested.returncode != 0 and "FAILED" in (tested.stdout + tested.stderr), tested.stdout


def _rules() -> list[dict]:
    return [r for g in yaml.safe_load((DEPLOY / "rules.yml").read_text())["groups"] for r in g["rules"]]


def test_every_alert_has_a_test_that_fires_it():
    tests = yaml.safe_load((DEPLOY / "rules_test.yml").read_text())
    assert tests["rule_files"] == ["rules.yml"]
    fired = {case["alertname"] for t in tests["tests"] for case in t["alert_rule_test"] if case["exp_alerts"]}
    quiet = {case["alertname"] for t in tests["tests"] for case in t["alert_rule_test"] if not case["exp_alerts"]}
    alerts = {r["alert"] for r in _rules()}
    assert {"LdpBudgetViolation", "LdpCheckpointLag", "LdpStrandedPurchases", "LdpWorkerGone"} <= alerts
    assert alerts == fired, f"alerts with no test that fires them: {alerts - fired}"
    assert alerts == quiet, f"alerts with no test that they stay quiet: {alerts - quiet}"


def test_the_rules_name_metrics_the_service_exposes_and_jobs_prometheus_scrapes(db):
    response = Client().get("/metrics")
    assert response.status_code == 200
    exposed = {f.name for f in text_string_to_metric_families(response.content.decode())}
    exposed |= {s.name for f in text_string_to_metric_families(response.content.decode()) for s in f.samples}
    used = {name for r in _rules() for name in re.findall(r"\bldpmarket_[a-z_]+\b", r["expr"])}
    assert used and used <= exposed, used - exposed
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    jobs = {c["job_name"] for c in config["scrape_configs"]}
    named = {job for r in _rules() for job in re.findall(r'job="([^"]+)"', r["expr"])}
    assert named == {"ldpmarket-web", "ldpmarket-worker"} and named <= jobs
    assert config["rule_files"] == ["rules.yml"]
