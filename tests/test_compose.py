"""docker-compose.yml, checked for structure (Docker itself does not run here; docs/operations.md).

Five services with health checks and healthy-dependency ordering, and Prometheus beside them; every command names
something that exists in the project (the Celery app, the WSGI module, manage.py commands); the environment each
application service gets is enough for ``ldpmarket.settings`` to load in production mode, on PostgreSQL and Redis,
with no default key; and Prometheus scrapes what the services serve, with the metrics token
(docs/operations.md#metrics).
"""
from __future__ import annotations

import importlib
import json
import re
import secrets
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.core.management import get_commands

ROOT = Path(__file__).resolve().parent.parent
APP_SERVICES = ("web", "worker", "beat")
SERVICES = ("postgres", "redis", *APP_SERVICES)
REQUIRED = ("DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY", "LDP_VALUE_KEY", "LDP_PSEUDONYM_KEY", "ALLOWED_HOSTS",
            "LDP_LOG_ORIGIN")
VAR = re.compile(r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
                 r"|\$(?P<bare>[A-Za-z_]\w*)")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def strong_keys() -> dict[str, str]:
    """Fresh keys as .env.example says to make them (weak ones refuse start-up: ldpmarket.keys)."""
    return {"DJANGO_SECRET_KEY": secrets.token_urlsafe(50), "LDP_VALUE_KEY": secrets.token_urlsafe(32),
            "LDP_PSEUDONYM_KEY": secrets.token_urlsafe(32), "LDP_LOG_ORIGIN": "localhost:8000/log",
            "LDP_METRICS_TOKEN": secrets.token_urlsafe(32)}


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}``, ``${VAR:?error}`` and ``$$``; a required one missing fails."""
    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group("name") or m.group("bare")
        op, arg = m.group("op"), m.group("arg")
        value = env.get(name)
        if op in (":-", ":?") and not value:
            value = None
        if value is not None:
            return value
        if op and op.endswith("?"):
            raise AssertionError(f"${{{name}}} is required: {arg}")
        return arg if op and op.endswith("-") else ""

    return VAR.sub(sub, text)


def environment_of(service: dict) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def strings_in(node) -> list[str]:
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in strings_in(k) + strings_in(v)]
    if isinstance(node, list):
        return [s for v in node for s in strings_in(v)]
    return [node] if isinstance(node, str) else []


def variables_used(compose: dict) -> set[str]:
    """Every ``${VAR}`` compose interpolates (comments aside)."""
    return {m.group("name") for text in strings_in(compose) for m in VAR.finditer(text) if m.group("name")}


def command_words(service: dict) -> list[str]:
    command = service.get("command")
    if command is None:
        return []
    return shlex.split(command) if isinstance(command, str) else [str(w) for w in command]


def shell_commands(words: list[str]) -> list[list[str]]:
    """The simple commands of a service's command (``sh -c "a && exec b"`` is split into a and b)."""
    if len(words) >= 3 and words[0] in ("sh", "bash", "/bin/sh") and words[1] == "-c":
        parts = re.split(r"&&|\|\||;", words[2])
        out = []
        for part in parts:
            w = shlex.split(part)
            if w and w[0] == "exec":
                w = w[1:]
            if w:
                out.append(w)
        return out
    return [words]


def dockerfile_cmd() -> list[str]:
    for line in reversed((ROOT / "Dockerfile").read_text().splitlines()):
        if line.startswith("CMD "):
            return json.loads(line[4:])
    raise AssertionError("the Dockerfile has no CMD")


def test_five_services_with_the_right_images(compose):
    services = compose["services"]
    assert set(SERVICES) <= set(services)
    assert str(services["postgres"]["image"]).startswith("postgres:16")
    assert str(services["redis"]["image"]).startswith("redis:7")
    for name in APP_SERVICES:
        build = services[name].get("build")
        assert build in (".", "./") or (isinstance(build, dict) and build.get("context") in (".", "./")), name
        assert (ROOT / "Dockerfile").is_file()


@pytest.mark.parametrize("name, probe", [("postgres", "pg_isready"), ("redis", "redis-cli ping"),
                                         ("web", "/health/"), ("worker", "inspect ping")])
def test_health_checks(compose, name, probe):
    check = compose["services"][name]["healthcheck"]
    test = check["test"]
    text = " ".join(test[1:]) if isinstance(test, list) else test
    assert isinstance(test, str) or test[0] in ("CMD", "CMD-SHELL")
    assert probe in text
    assert "interval" in check and "retries" in check


def test_web_health_check_hits_the_health_url(compose):
    from django.urls import resolve

    test = " ".join(compose["services"]["web"]["healthcheck"]["test"])
    url = re.search(r"http://localhost:8000(/[\w/]*)", test).group(1)
    assert resolve(url).url_name == "health"
    port = compose["services"]["web"]["ports"][0]
    assert interpolate(str(port), {}).endswith(":8000")


def test_dependencies_wait_for_healthy_services(compose):
    services = compose["services"]
    for name in APP_SERVICES:
        depends = services[name]["depends_on"]
        for needed in ("postgres", "redis"):
            assert depends[needed]["condition"] == "service_healthy", (name, needed)
    # worker and beat start after web has migrated the database and answers its health check
    for name in ("worker", "beat"):
        assert services[name]["depends_on"]["web"]["condition"] == "service_healthy"
    for name, service in services.items():
        for needed, spec in (service.get("depends_on") or {}).items():
            assert "healthcheck" in services[needed], f"{name} waits for {needed}, which has no health check"


def _check_command(words: list[str]) -> None:
    program = words[0]
    if program == "python" and words[1] == "manage.py":
        assert words[2] in get_commands(), f"manage.py has no command {words[2]!r}"
    elif program == "gunicorn":
        target = next(w for w in words[1:] if not w.startswith("-") and ":" in w)
        module, attribute = target.split(":")
        assert callable(getattr(importlib.import_module(module), attribute))
    elif program == "celery":
        app = words[words.index("-A") + 1] if "-A" in words else words[words.index("--app") + 1]
        module = importlib.import_module(app)
        celery_app = getattr(module, "celery_app", None) or importlib.import_module(f"{app}.celery").app
        assert celery_app.main == "ldpmarket"
        sub = [w for w in words[words.index(app) + 1:] if not w.startswith("-")]
        assert sub[0] in ("worker", "beat", "inspect"), sub
    else:
        raise AssertionError(f"unexpected program {program!r} in {words}")


@pytest.mark.filterwarnings("ignore:No directory at:UserWarning")  # whitenoise: no collectstatic in tests
def test_commands_refer_to_what_exists(compose):
    services = compose["services"]
    web = shell_commands(command_words(services["web"]))
    assert [w[:3] for w in web][0] == ["python", "manage.py", "migrate"], "web migrates before it serves"
    assert web[-1][0] == "gunicorn"
    worker = command_words(services["worker"])
    beat = command_words(services["beat"])
    assert worker[:4] == ["celery", "-A", "ldpmarket", "worker"]
    assert beat[:4] == ["celery", "-A", "ldpmarket", "beat"]
    for words in [*web, worker, beat, dockerfile_cmd()]:
        _check_command(words)
    health = compose["services"]["worker"]["healthcheck"]["test"][1]
    _check_command(shlex.split(interpolate(health, {"HOSTNAME": "x"})))


def test_celery_beat_schedules_existing_tasks():
    from django.conf import settings

    assert settings.CELERY_BEAT_SCHEDULE
    for entry in settings.CELERY_BEAT_SCHEDULE.values():
        module, _, name = entry["task"].rpartition(".")
        assert getattr(importlib.import_module(module), name).name == entry["task"]


def test_required_variables_are_provided(compose):
    for name in APP_SERVICES:
        env = environment_of(compose["services"][name])
        missing = [v for v in REQUIRED if v not in env]
        assert not missing, f"{name} lacks {missing}"
        assert env["DJANGO_DEBUG"] in ("0", "false", "False"), "the production shape runs without DEBUG"
    # the keys have no default in compose: it refuses to start rather than use a guessable key
    web = environment_of(compose["services"]["web"])
    for key in ("DJANGO_SECRET_KEY", "LDP_VALUE_KEY", "LDP_PSEUDONYM_KEY"):
        assert re.fullmatch(r"\$\{%s:\?[^}]+\}" % key, web[key]), web[key]
        with pytest.raises(AssertionError, match=key):
            interpolate(web[key], {})


def test_database_url_matches_the_postgres_service(compose):
    services = compose["services"]
    env = {k: interpolate(v, {}) for k, v in environment_of(services["postgres"]).items()}
    web = environment_of(services["web"])
    url = interpolate(web["DATABASE_URL"], {})
    assert url == (f"postgres://{env['POSTGRES_USER']}:{env['POSTGRES_PASSWORD']}@postgres:5432/"
                   f"{env['POSTGRES_DB']}")
    assert interpolate(web["REDIS_URL"], {}).startswith("redis://redis:6379/")
    pg_check = " ".join(services["postgres"]["healthcheck"]["test"][1:])
    assert env["POSTGRES_USER"] in pg_check and env["POSTGRES_DB"] in pg_check


PROBE = """
import json, environ
environ.Env.read_env = lambda *a, **k: None  # only the environment compose gives, never a developer's .env
from django.conf import settings
print(json.dumps({
    "debug": settings.DEBUG, "engine": settings.DATABASES["default"]["ENGINE"],
    "host": settings.DATABASES["default"]["HOST"], "eager": settings.CELERY_TASK_ALWAYS_EAGER,
    "broker": settings.CELERY_BROKER_URL, "cache": settings.CACHES["default"]["BACKEND"],
    "hosts": settings.ALLOWED_HOSTS, "secret": settings.SECRET_KEY, "value_key": settings.LDP_VALUE_KEY,
}))
"""


@pytest.mark.parametrize("name", APP_SERVICES)
def test_settings_load_in_production_mode_from_the_compose_environment(compose, name, tmp_path):
    given = strong_keys()
    env = {k: interpolate(v, given) for k, v in environment_of(compose["services"][name]).items()}
    env.update({"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "ldpmarket.settings", "PYTHONPATH": str(ROOT)})
    if "PROMETHEUS_MULTIPROC_DIR" in env:  # the container's tmpfs: here a directory of the test's own
        env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout.strip().splitlines()[-1])
    assert s["debug"] is False
    # Django's PostgreSQL backend, its queries counted by django-prometheus (docs/operations.md#metrics)
    assert s["engine"] == "django_prometheus.db.backends.postgresql" and s["host"] == "postgres"
    assert s["eager"] is False and s["broker"].startswith("redis://redis:")
    assert s["cache"].endswith("RedisCache")
    assert "localhost" in s["hosts"]
    assert (s["secret"], s["value_key"]) == (given["DJANGO_SECRET_KEY"], given["LDP_VALUE_KEY"])


def test_system_checks_pass_with_the_compose_environment(compose, tmp_path):
    """What gunicorn, the workers and ``make run`` import at start-up loads and passes ``manage.py check``."""
    given = strong_keys()
    env = {k: interpolate(v, given) for k, v in environment_of(compose["services"]["web"]).items()}
    env.update({"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "ldpmarket.settings", "PYTHONPATH": str(ROOT),
                "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)})  # the container's tmpfs: a directory of the test's own
    probe = ("import environ; environ.Env.read_env = lambda *a, **k: None\n"
             "import django; django.setup()\n"
             "from django.core.management import call_command; call_command('check', fail_level='ERROR')\n"
             "import ldpmarket.wsgi, ldpmarket.celery\n")
    out = subprocess.run([sys.executable, "-W", "ignore::UserWarning", "-c", probe], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]


def test_settings_refuse_to_start_without_keys():
    """What makes the keys required: without DEBUG, settings have no default for them."""
    env = {"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "ldpmarket.settings", "PYTHONPATH": str(ROOT),
           "DJANGO_DEBUG": "0"}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode != 0 and "ImproperlyConfigured" in out.stderr


def test_every_setting_read_from_the_environment_is_documented_or_given():
    """Each variable settings.py reads appears in .env.example or the compose file, so operators can find it."""
    settings_text = (ROOT / "ldpmarket" / "settings.py").read_text()
    read = set(re.findall(r"env(?:\.\w+)?\(\s*\"([A-Z][A-Z0-9_]*)\"", settings_text))
    assert set(REQUIRED) - {"DATABASE_URL"} <= read and "DATABASE_URL" in read
    documented = (ROOT / ".env.example").read_text() + (ROOT / "docker-compose.yml").read_text()
    readme = (ROOT / "README.md").read_text()
    for name in sorted(read):
        assert name in readme, f"README's settings table lacks {name}"
    for name in REQUIRED:
        assert name in documented


def test_env_example_names_every_compose_variable(compose):
    example = (ROOT / ".env.example").read_text()
    assert {"DJANGO_SECRET_KEY", "POSTGRES_PASSWORD"} <= variables_used(compose)
    for name in sorted(variables_used(compose)):
        assert re.search(rf"^#?\s*{name}=", example, re.M), f".env.example lacks {name}"


def test_dockerignore_keeps_secrets_and_local_state_out():
    ignored = (ROOT / ".dockerignore").read_text().split()
    for entry in (".env", ".venv", ".git", "*.sqlite3"):
        assert entry in ignored
    dockerfile = (ROOT / "Dockerfile").read_text()
    for copied in re.findall(r"^COPY (\S+) ", dockerfile, re.M):
        assert copied == "." or (ROOT / copied).exists(), copied


# ------------------------------------------------------------------------------------------- Prometheus

def test_prometheus_runs_with_its_config_rules_and_the_metrics_token(compose):
    service = compose["services"]["prometheus"]
    assert str(service["image"]).startswith("prom/prometheus:v")
    assert "./deploy/prometheus:/etc/prometheus:ro" in service["volumes"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in service["command"]
    for name in ("prometheus.yml", "rules.yml", "rules_test.yml"):
        assert (ROOT / "deploy" / "prometheus" / name).is_file(), name
    # the token reaches Prometheus as a secret file, from the variable the app services read
    (secret,) = service["secrets"]
    assert compose["secrets"][secret] == {"environment": "LDP_METRICS_TOKEN"}
    for name in APP_SERVICES:
        assert environment_of(compose["services"][name])["LDP_METRICS_TOKEN"].startswith("${LDP_METRICS_TOKEN:?")
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    for name in ("ldpmarket-web", "ldpmarket-worker"):
        assert jobs[name]["authorization"] == {"type": "Bearer", "credentials_file": f"/run/secrets/{secret}"}
    # its UI on the host's loopback only; it starts once web answers
    assert interpolate(str(service["ports"][0]), {}).startswith("127.0.0.1:")
    assert service["depends_on"]["web"]["condition"] == "service_healthy"
    assert "/-/ready" in " ".join(service["healthcheck"]["test"])


def test_prometheus_scrapes_what_web_and_the_workers_serve(compose):
    from django.urls import resolve

    services = compose["services"]
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    web = jobs["ldpmarket-web"]
    assert resolve(web["metrics_path"]).url_name == "metrics"
    (target,) = web["static_configs"][0]["targets"]
    host, port = target.split(":")
    assert host == "web" and interpolate(str(services["web"]["ports"][0]), {}).endswith(f":{port}")
    # the host name Prometheus sends is allowed, whatever ALLOWED_HOSTS the operator sets
    for given in ({}, {"ALLOWED_HOSTS": "market.example.org"}):
        allowed = interpolate(environment_of(services["web"])["ALLOWED_HOSTS"], given).split(",")
        assert "web" in allowed and (given.get("ALLOWED_HOSTS", "localhost") in allowed)
    worker = jobs["ldpmarket-worker"]
    (sd,) = worker["dns_sd_configs"]
    assert sd["names"] == ["worker"] and sd["type"] == "A"
    assert worker["metrics_path"] == "/metrics"  # what ldpmarket.metrics.worker_metrics_app serves
    worker_env = environment_of(services["worker"])
    assert int(worker_env["LDP_WORKER_METRICS_PORT"]) == sd["port"]
    # web and worker sum their processes' metrics through a directory that is empty at each start (a tmpfs)
    for name in ("web", "worker"):
        directory = environment_of(services[name])["PROMETHEUS_MULTIPROC_DIR"]
        assert directory in services[name]["tmpfs"], name
    assert "PROMETHEUS_MULTIPROC_DIR" not in environment_of(services["beat"])

