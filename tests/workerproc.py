"""Real Celery workers for integration tests: start one in a process group of its own, kill it, clean up.

The worker runs the production settings (``ldpmarket.settings``: not eager, acks_late,
reject_on_worker_lost) with the test keys and the test database, on a queue of its own.  Its broker and
cache are a Redis database of their own (``LDP_TEST_WORKER_REDIS_DB``, default 9; ``REDIS_URL`` names the
server), and every broker key it uses carries a prefix unique to the test (kombu's ``global_keyprefix``,
the unacknowledged-message index included), so that:

* no stale task from elsewhere can reach it, and it takes nothing from anyone else;
* a short ``visibility_timeout`` (redelivery of the tasks of a killed worker) only ever restores this test's
  own messages, never another test's task that is still running;
* the cache the worker reports progress into is not shared with tests that use ``REDIS_URL``'s database.

Start it through :class:`Broker` (which also sends tasks to it, or has what the project's code enqueues sent
to it, and reads its cache); run this module as
``python -m tests.workerproc <celery worker args>`` to start a worker with the broker options given in the
``LDP_TEST_BROKER_TRANSPORT_OPTIONS`` environment variable (JSON), and ``LDP_TEST_QUEUE`` as the queue
of everything it (or its embedded beat, ``-B``) enqueues: plain ``celery worker`` has no way to set them
from the environment.

:class:`RedisServer` is a Redis server of the test's own (its own port), for broker and cache outages.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
OPTIONS_ENV = "LDP_TEST_BROKER_TRANSPORT_OPTIONS"
QUEUE_ENV = "LDP_TEST_QUEUE"


def redis_url(db: int | None = None) -> str:
    """``REDIS_URL`` with its database replaced by the workers' own (``LDP_TEST_WORKER_REDIS_DB``, default 9)."""
    if db is None:
        db = int(os.environ.get("LDP_TEST_WORKER_REDIS_DB", "9"))
    parts = urlsplit(os.environ["REDIS_URL"])
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", parts.query, parts.fragment))


def database_url(application_name: str) -> str:
    """The test database (the one the test process uses), tagged with an application name for pg_stat_activity.

    Its sessions check every 100 ms that their client is still there, even while they wait for a lock
    (``client_connection_check_interval``): a killed worker's transaction is rolled back at once instead of
    when its lock wait ends.
    """
    from django.db import connection

    s = connection.settings_dict
    auth = quote(s.get("USER") or "postgres")
    if s.get("PASSWORD"):
        auth += ":" + quote(s["PASSWORD"])
    return (f"postgres://{auth}@{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"
            f"?application_name={application_name}&options={quote('-c client_connection_check_interval=100')}")


class RowLock:
    """Rows locked (``SELECT ... FOR UPDATE``) by a database session of their own, until :meth:`release`.

    A worker that needs them waits, inside its transaction, at a known point: the test can look at the
    database while it waits, kill it there, and let it go on when it wants.
    """

    def __init__(self, sql: str, params=()):
        import psycopg
        from django.db import connection

        s = connection.settings_dict
        self.conn = psycopg.connect(host=s.get("HOST") or "127.0.0.1", port=s.get("PORT") or 5432,
                                    user=s.get("USER") or "postgres", password=s.get("PASSWORD") or None,
                                    dbname=s["NAME"], application_name="ldp-test-lock", autocommit=False)
        rows = self.conn.execute(sql, params).fetchall()
        if not rows:
            self.release()
            raise AssertionError(f"nothing to lock: {sql}")

    def release(self) -> None:
        if not self.conn.closed:
            self.conn.rollback()
            self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def wait_until(predicate, timeout: float, interval: float = 0.05, message=lambda: ""):
    """Poll ``predicate`` until it returns something truthy (returned), or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s: {message()}")


class RedisServer:
    """A Redis server of the test's own, on a free port of its own (6390 and up), that the test can stop and
    start again on the same port: a broker or cache outage without touching the shared server.

    ``redis-server --save "" --appendonly no --daemonize yes``; :meth:`stop` is ``redis-cli shutdown nosave``
    (everything it held is lost, as in a crash).
    """

    def __init__(self, tmp_path: Path):
        if not shutil.which("redis-server") or not shutil.which("redis-cli"):
            import pytest

            pytest.skip("needs redis-server and redis-cli")
        self.dir = tmp_path
        self.port = self._free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.start()

    @staticmethod
    def _free_port() -> int:
        for port in random.sample(range(6390, 6990), 600):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
        raise AssertionError("no free port for a private Redis server")

    def ping(self) -> bool:
        return subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True,
                              text=True).stdout.strip() == "PONG"

    def start(self) -> None:
        subprocess.run(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                        "--appendonly", "no", "--daemonize", "yes", "--dir", str(self.dir),
                        "--pidfile", str(self.dir / f"redis-{self.port}.pid"),
                        "--logfile", str(self.dir / f"redis-{self.port}.log")], check=True)
        wait_until(self.ping, 10, message=lambda: f"redis-server on {self.port} did not start")

    def stop(self) -> None:
        subprocess.run(["redis-cli", "-p", str(self.port), "shutdown", "nosave"], capture_output=True)
        wait_until(lambda: not self.ping(), 10, message=lambda: f"redis-server on {self.port} did not stop")

    def _pid(self) -> int:
        return int((self.dir / f"redis-{self.port}.pid").read_text().strip())

    def freeze(self) -> None:
        """SIGSTOP: the server still accepts connections (the kernel does) but answers nothing, like a hung
        host or a network partition, the outage that costs clients their timeouts."""
        os.kill(self._pid(), signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self._pid(), signal.SIGCONT)
        wait_until(self.ping, 10, message=lambda: f"redis-server on {self.port} did not answer again")


class Broker:
    """A private broker namespace (Redis database + key prefix + queue) for this test's workers.

    ``visibility_timeout``: seconds after which a message that was delivered but never acknowledged (its
    worker died) is put back in the queue by any worker of this namespace.
    """

    def __init__(self, tmp_path: Path, *, visibility_timeout: float = 3600, url: str | None = None):
        from celery import Celery

        self.url = url or redis_url()
        self.tag = f"ldptest-{uuid.uuid4().hex[:12]}"
        self.queue = self.tag
        self.options = {"global_keyprefix": f"{self.tag}:", "visibility_timeout": visibility_timeout,
                        # look for messages to restore every second (not every 10 x 10 s)
                        "unacked_restore_interval": 1, "unacked_restore_throttle": 1}
        self.tmp_path = tmp_path
        self.workers: list[Worker] = []
        self.app = Celery(self.tag, broker=self.url, set_as_current=False)
        self.app.conf.broker_transport_options = self.options
        self.app.conf.broker_connection_retry_on_startup = True
        self.app.conf.task_serializer = "json"

    def cache_settings(self) -> dict:
        """``CACHES`` that read the same cache as the workers (for ``settings.CACHES = ...``)."""
        return {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": self.url}}

    def send(self, task_name: str, *args) -> None:
        self.app.send_task(task_name, args=list(args), queue=self.queue, ignore_result=True)

    def route_project_tasks(self, monkeypatch) -> None:
        """Until ``monkeypatch`` is undone, every task the project's Celery app sends (``task.delay(...)``: what a
        service enqueues on commit, say) is sent, for real and not run eagerly, to this namespace's queue."""
        from ldpmarket.celery import app

        def send_task(name, args=None, kwargs=None, **options):
            return self.app.send_task(name, args, kwargs, **{**options, "queue": self.queue})

        monkeypatch.setitem(app.conf, "task_always_eager", False)
        monkeypatch.setattr(app, "send_task", send_task)

    def start(self, *, beat: bool = False, **env) -> Worker:
        """A worker of this namespace (``env``: settings for it, e.g. ``LDP_EXTENSION_BATCH=100``); ``beat``: with
        Celery beat embedded (``-B``), which sends the periodic tasks to this namespace's queue."""
        worker = Worker(self, self.tmp_path / f"{self.tag}-worker{len(self.workers)}.log", env, beat=beat)
        self.workers.append(worker)
        worker.wait_ready()
        return worker

    def redis(self):
        import redis

        return redis.Redis.from_url(self.url)

    def keys(self) -> list[bytes]:
        return list(self.redis().scan_iter(match=f"{self.tag}:*"))

    def unacked(self) -> int:
        """Messages delivered to a worker and not acknowledged yet (in this namespace)."""
        return self.redis().hlen(f"{self.tag}:unacked")

    def close(self) -> None:
        """Stop every worker, then drop every broker key of this namespace (queue, unacked index, bindings)."""
        for worker in self.workers:
            worker.stop()
        import redis

        try:
            r = self.redis()
            for key in self.keys():
                r.delete(key)
        except redis.ConnectionError:  # a private server the test has stopped: nothing is left in it
            pass
        self.app.close()


class Worker:
    """One ``celery worker`` process group (main process + one prefork child)."""

    def __init__(self, broker: Broker, log: Path, extra_env: dict, *, beat: bool = False):
        from django.conf import settings

        self.broker, self.log_path = broker, log
        self.node = f"{broker.tag}-{uuid.uuid4().hex[:6]}@localhost"
        self.db_name = f"ldp-worker-{uuid.uuid4().hex[:8]}"
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "ldpmarket.settings",
            "DJANGO_SECRET_KEY": settings.SECRET_KEY,
            "LDP_VALUE_KEY": settings.LDP_VALUE_KEY,
            "LDP_PSEUDONYM_KEY": settings.LDP_PSEUDONYM_KEY,
            "DATABASE_URL": database_url(self.db_name),
            "REDIS_URL": broker.url,
            OPTIONS_ENV: json.dumps(broker.options),
            QUEUE_ENV: broker.queue,
            "PYTHONPATH": str(ROOT),
            **{k: str(v) for k, v in extra_env.items()},
        }
        for name in ("CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "CELERY_TASK_ALWAYS_EAGER", "DJANGO_DEBUG"):
            env.pop(name, None)
        self._log = open(log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.workerproc", "--pool=prefork", "--concurrency=1", "-Q", broker.queue,
             "-n", self.node, "--loglevel=INFO", "--without-gossip", "--without-mingle", "--without-heartbeat",
             "--prefetch-multiplier=1",
             *(["-B", "-s", str(log.with_suffix(".beat-schedule"))] if beat else [])],
            cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log(self) -> str:
        """The end of the worker's log, for failure messages."""
        return self.text()[-4000:]

    def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the worker exited with {self.proc.returncode}:\n{self.log()}")
            if "ready." in self.text() and self.broker.app.control.ping(destination=[self.node], timeout=1.0):
                return
            time.sleep(0.2)
        raise AssertionError(f"the worker did not become ready in {timeout}s:\n{self.log()}")

    def children(self) -> list[int]:
        path = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        return [int(p) for p in path.read_text().split()] if path.exists() else []

    def kill_group(self) -> None:
        """SIGKILL the main process and its pool children at once: nothing gets to clean up or reject."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                self.kill_group()
        else:  # the main process is gone; make sure no orphaned child lingers in its group
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if not self._log.closed:
            self._log.close()

    def backends(self, *, waiting_for_lock: bool = False) -> list[int]:
        """Server pids of this worker's database sessions (optionally: only those waiting for a lock, inside a
        transaction that has written or locked rows)."""
        from django.db import connection

        sql = "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
        if waiting_for_lock:
            sql += " AND wait_event_type = 'Lock' AND backend_xid IS NOT NULL"
        with connection.cursor() as cur:
            cur.execute(sql, [self.db_name])
            return sorted(r[0] for r in cur.fetchall())

    def sessions(self) -> int:
        """This worker's open database sessions (the server notices killed clients by itself)."""
        return len(self.backends())


def main(argv: list[str]) -> None:
    """``celery worker`` with ``broker_transport_options`` from ``LDP_TEST_BROKER_TRANSPORT_OPTIONS``."""
    from ldpmarket.celery import app

    options = json.loads(os.environ.get(OPTIONS_ENV) or "{}")
    if options:
        app.conf.broker_transport_options = options
    if os.environ.get(QUEUE_ENV):  # what the worker and its beat enqueue goes to the test's own queue
        app.conf.task_default_queue = os.environ[QUEUE_ENV]
    app.worker_main(["worker", *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
