"""Production settings (docs/security.md): ``check --deploy`` is clean, weak keys refuse start-up, headers.

The subprocess tests load ``ldpmarket.settings`` with ``DJANGO_DEBUG=0`` and only the environment they
give (never a developer's ``.env``); the header tests go through the test client and the real middleware.
"""
from __future__ import annotations

import re
import secrets
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.test import Client

ROOT = Path(__file__).resolve().parents[2]
NO_DOTENV = "import environ; environ.Env.read_env = lambda *a, **k: None\n"


def strong_keys() -> dict[str, str]:
    return {"DJANGO_SECRET_KEY": secrets.token_urlsafe(50), "LDP_VALUE_KEY": secrets.token_urlsafe(32),
            "LDP_PSEUDONYM_KEY": secrets.token_urlsafe(32)}


def production_env(**overrides) -> dict[str, str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "ldpmarket.settings",
           "DJANGO_DEBUG": "0", "ALLOWED_HOSTS": "market.example.org", "LDP_LOG_ORIGIN": "market.example.org/log",
           **strong_keys()}
    env.update(overrides)
    return {k: v for k, v in env.items() if v is not None}


def run_python(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-W", "ignore::UserWarning", "-c", NO_DOTENV + code], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=180)


CHECK_DEPLOY = ("import django; django.setup()\n"
                "from django.core.management import call_command\n"
                "call_command('check', deploy=True, fail_level='DEBUG')\n")


def test_check_deploy_reports_nothing_in_production_mode():
    out = run_python(CHECK_DEPLOY, production_env())
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    assert "System check identified no issues" in out.stdout, out.stdout + out.stderr


def test_behind_a_tls_proxy_the_forwarded_scheme_is_opt_in():
    probe = ("import django; django.setup()\nfrom django.conf import settings\n"
             "print(repr(settings.SECURE_PROXY_SSL_HEADER), settings.SECURE_SSL_REDIRECT)\n")
    plain = run_python(probe, production_env())
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert plain.stdout.split() == ["None", "True"]
    proxied = run_python(probe, production_env(DJANGO_SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO,https"))
    assert proxied.returncode == 0, proxied.stderr[-2000:]
    assert proxied.stdout.strip() == "('HTTP_X_FORWARDED_PROTO', 'https') True"
    bad = run_python(probe, production_env(DJANGO_SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto"))
    assert bad.returncode != 0 and "DJANGO_SECURE_PROXY_SSL_HEADER" in bad.stderr


PLACEHOLDER = "replace-me-with-a-fresh-random-string"  # what .env.example holds


@pytest.mark.parametrize("name", ["DJANGO_SECRET_KEY", "LDP_VALUE_KEY", "LDP_PSEUDONYM_KEY"])
@pytest.mark.parametrize("weak", ["short-key", "a" * 80, "ab" * 40, PLACEHOLDER, PLACEHOLDER + "-" + "x" * 20,
                                  "django-insecure-" + "k3j4h5g6f7d8s9a0" * 4])
def test_weak_keys_refuse_start_up_without_debug(name, weak):
    out = run_python("import django; django.setup()\n", production_env(**{name: weak}))
    assert out.returncode != 0, f"{name}={weak!r} was accepted"
    last = out.stderr.strip().splitlines()[-1]
    assert "ImproperlyConfigured" in last and name in last and "docs/security.md" in last, last
    assert weak not in out.stderr, "the refused key is never printed"


def test_the_same_key_twice_is_refused():
    key = secrets.token_urlsafe(50)
    out = run_python("import django; django.setup()\n", production_env(DJANGO_SECRET_KEY=key, LDP_VALUE_KEY=key))
    assert out.returncode != 0 and "LDP_VALUE_KEY" in out.stderr.strip().splitlines()[-1]


def test_debug_mode_still_runs_with_development_keys():
    env = production_env(DJANGO_DEBUG="1", DJANGO_SECRET_KEY=None, LDP_VALUE_KEY=None, LDP_PSEUDONYM_KEY="short")
    out = run_python("import django; django.setup()\nprint('ok')\n", env)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


# ------------------------------------------------------------------------------------------------ headers

@pytest.fixture
def staff_client(client, db):
    from tests.factories import StaffFactory

    client.force_login(StaffFactory(is_superuser=True))
    return client


def test_security_headers_are_sent(client, db):
    response = client.get("/portal/login/", secure=True)
    assert response.status_code == 200
    csp = response["Content-Security-Policy"]
    directives = dict((d.split()[0], d.split()[1:]) for d in csp.split(";") if d.strip())
    assert directives["default-src"] == ["'self'"]
    assert directives["script-src"] == ["'self'"] and directives["style-src"] == ["'self'"]
    assert directives["object-src"] == ["'none'"] and directives["frame-ancestors"] == ["'none'"]
    assert directives["form-action"] == ["'self'"] and directives["base-uri"] == ["'none'"]
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp and "http" not in csp
    assert response["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains; preload"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["X-Frame-Options"] == "DENY"
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"
    csrf = response.cookies["csrftoken"]
    assert csrf["secure"] and csrf["samesite"] == "Lax"


def test_the_session_cookie_is_secure_and_http_only(client, db):
    from tests.factories import PASSWORD, OwnerFactory

    owner = OwnerFactory()
    response = client.post("/portal/login/", {"username": owner.username, "password": PASSWORD}, secure=True)
    assert response.status_code == 302
    session = response.cookies["sessionid"]
    assert session["secure"] and session["httponly"] and session["samesite"] == "Lax"


def test_api_and_admin_responses_carry_the_policy_too(staff_client):
    for url in ("/api/v1/datasets/", "/admin/", "/health/"):
        response = staff_client.get(url, secure=True)
        assert response.status_code == 200, url
        csp = response["Content-Security-Policy"]
        assert "default-src 'self'" in csp and "unsafe-inline" not in csp, url
        assert response["X-Content-Type-Options"] == "nosniff"
    # the browsable API's pages (REST framework's templates use style attributes): inline styles, no scripts
    page = staff_client.get("/api/v1/datasets/", secure=True, HTTP_ACCEPT="text/html")
    assert page["Content-Type"].startswith("text/html")
    csp = dict((d.split()[0], d.split()[1:]) for d in page["Content-Security-Policy"].split(";") if d.strip())
    assert csp["style-src"] == ["'self'", "'unsafe-inline'"] and csp["script-src"] == ["'self'"]


class _Refs(HTMLParser):
    """Every URL a page loads or posts to (src, href of stylesheets/icons, action, srcset), and inline code."""

    def __init__(self):
        super().__init__()
        self.urls: list[str] = []
        self.inline: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("src", "action", "data", "poster", "formaction"):
            if a.get(key):
                self.urls.append(a[key])
        if tag == "link" and a.get("href"):
            self.urls.append(a["href"])
        if a.get("srcset"):
            self.urls += [part.split()[0] for part in a["srcset"].split(",")]
        if "style" in a:
            self.inline.append(f"<{tag} style=...>")
        self.inline += [f"<{tag} {k}=...>" for k in a if k.startswith("on")]
        if tag == "style":
            self.inline.append("<style>")
        self._in_script = tag == "script" and not a.get("src") and a.get("type") != "application/json"

    def handle_data(self, data):
        if self._in_script and data.strip():
            self.inline.append("<script>" + data.strip()[:40])

    def handle_endtag(self, tag):
        self._in_script = False


def _other_origin(url: str) -> bool:
    return bool(re.match(r"^(?:[a-z][a-z0-9+.-]*:)?//", url, re.I)) and not url.startswith("data:")


ANONYMOUS_PAGES = ["/portal/login/", "/portal/signup/", "/admin/login/"]
STAFF_PAGES = ["/admin/", "/admin/accounts/ledgerentry/", "/admin/accounts/user/", "/admin/accounts/user/add/",
               "/admin/market/dataset/add/", "/admin/accounts/ledgerentry/overview/",
               "/admin/accounts/ledgerentry/audit/"]


@pytest.mark.parametrize("url", ANONYMOUS_PAGES + STAFF_PAGES)
def test_pages_load_nothing_from_another_origin_and_run_no_inline_code(client, staff_client, url):
    response = (staff_client if url in STAFF_PAGES else Client()).get(url, secure=True)
    assert response.status_code == 200, url
    refs = _Refs()
    refs.feed(response.content.decode())
    assert [u for u in refs.urls if _other_origin(u)] == [], url
    assert refs.inline == [], f"{url}: inline code the Content-Security-Policy blocks: {refs.inline}"


def test_portal_owner_pages_have_no_inline_code(client, db):
    from tests.factories import OwnerFactory

    owner = OwnerFactory()
    client.force_login(owner)
    for url in ("/portal/", "/portal/contribute/", "/portal/releases/"):
        refs = _Refs()
        refs.feed(client.get(url, secure=True).content.decode())
        assert [u for u in refs.urls if _other_origin(u)] == [] and refs.inline == [], (url, refs.inline)


@pytest.mark.parametrize("url", ["/api/docs/", "/api/redoc/"])
def test_api_docs_load_nothing_from_another_origin(client, db, url):
    refs = _Refs()
    refs.feed(client.get(url, secure=True).content.decode())
    assert [u for u in refs.urls if _other_origin(u)] == []


def _gunicorn_get(env: dict, headers: dict) -> tuple[int, str]:
    """Start gunicorn (the image's command, reading ROOT/gunicorn.conf.py) on a free loopback port, GET /portal/
    over plain http with ``headers``; the status and Location (redirects are not followed)."""
    import http.client
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gunicorn = Path(sys.executable).with_name("gunicorn")
    proc = subprocess.Popen([str(gunicorn), "ldpmarket.wsgi:application", "--bind", f"127.0.0.1:{port}",
                             "--workers", "1"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                conn.request("GET", "/portal/", headers={"Host": "market.example.org", **headers})
                response = conn.getresponse()
                return response.status, response.getheader("Location") or ""
            except (ConnectionRefusedError, http.client.RemoteDisconnected):
                assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
                assert time.monotonic() < deadline, "gunicorn did not start"
                time.sleep(0.3)
    finally:
        proc.terminate()
        proc.wait(30)


def test_gunicorn_trusts_no_forwarded_scheme_unless_django_is_told(tmp_path):
    """Issue 27: gunicorn believed ``X-Forwarded-Proto: https`` from 127.0.0.1 by default, so a plain-http
    request from the host itself was served as https (no redirect) even with DJANGO_SECURE_PROXY_SSL_HEADER
    unset.  ``gunicorn.conf.py`` turns that off: Django's setting is the one switch."""
    env = production_env(PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin",
                         DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}")
    claimed = {"X-Forwarded-Proto": "https", "X-Forwarded-Ssl": "on", "X-Forwarded-Protocol": "ssl"}
    status, location = _gunicorn_get(env, claimed)
    assert (status, location) == (301, "https://market.example.org/portal/")
    proxied = production_env(PATH=env["PATH"], DATABASE_URL=env["DATABASE_URL"],
                             DJANGO_SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO,https")
    status, location = _gunicorn_get(proxied, {"X-Forwarded-Proto": "https"})
    assert not location.startswith("https://market.example.org/portal/"), (status, location)
