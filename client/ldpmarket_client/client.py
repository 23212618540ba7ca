"""The buyer API of an ldpmarket service, from Python (docs/client.md in the repository).

    from ldpmarket_client import Client

    client = Client("http://127.0.0.1:8000", username="demo-buyer", password="demo-buyer-password")
    purchase = client.buy(attribute=1, epsilon="0.5")      # Idempotency-Key, retries and waiting included
    outputs = client.outputs(purchase["id"])               # a pandas DataFrame
    estimate = client.estimate(purchase["id"])
"""
from __future__ import annotations

import email.utils
import io
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import IO, Any
from urllib.parse import urljoin

import requests

from . import errors

DEFAULT_URL = "http://127.0.0.1:8000"
API_PREFIX = "/api/v1/"
#: A purchase's states; the last two are final.
FINAL = ("completed", "failed")


def _number(value) -> str | None:
    """An epsilon or parameter as the API reads it exactly: a decimal string (floats by their shortest repr)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        raise TypeError("a number is expected, not a bool")
    if isinstance(value, float):
        return repr(value)
    return str(Decimal(value))


def _retry_after(response: requests.Response) -> float | None:
    """``Retry-After`` in seconds (delta-seconds or an HTTP date), or ``None``."""
    value = response.headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        return max(0.0, when.timestamp() - time.time())


def _request_id(body: dict, response: requests.Response) -> str | None:
    """The service's id of the request: the problem's ``request_id``, else the ``X-Request-ID`` header."""
    value = body.get("request_id")
    return value if isinstance(value, str) and value else response.headers.get("X-Request-ID")


def _plain_text(response: requests.Response) -> str:
    """The body of an error answer that is no problem document (a proxy's, say), if it is short plain text."""
    if response.headers.get("Content-Type", "").startswith("text/plain"):
        return response.text.strip()[:300]
    return ""


class _Progress:
    """A tqdm bar on stderr if tqdm is installed, else a plain line each time the count changes."""

    def __init__(self, purchase_id, enabled: bool, stream: IO[str] | None = None):
        self.enabled, self.stream, self.bar, self.last = enabled, stream or sys.stderr, None, None
        self.label = f"purchase {purchase_id}"
        if enabled:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(total=None, desc=self.label, unit="values", file=self.stream, leave=True)

    def update(self, processed: int, total: int) -> None:
        if not self.enabled or (processed, total) == self.last:
            return
        self.last = (processed, total)
        if self.bar is not None:
            if total and self.bar.total != total:
                self.bar.total = total
            self.bar.n = processed
            self.bar.refresh()
        else:
            share = f" ({100 * processed / total:.0f}%)" if total else ""
            print(f"{self.label}: {processed}/{total or '?'} values{share}", file=self.stream, flush=True)

    def close(self, status: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.set_postfix_str(status)
            self.bar.close()
        else:
            print(f"{self.label}: {status}", file=self.stream, flush=True)


class Client:
    """A signed-in buyer (or owner) of one ldpmarket service.

    ``url`` is the service's address (``http://host:port``; a trailing ``/api/v1`` is accepted).  Sign in with
    a ``token`` (``Authorization: Token <key>``) or with ``username`` and ``password`` (``POST
    /api/v1/auth/token/``; the new token is in :attr:`token`, its expiry in :attr:`token_expiry`).

    429 and 503 answers are retried after their ``Retry-After`` up to ``max_retries`` times, each wait at most
    ``max_retry_wait`` seconds (a longer ``Retry-After``, such as a sign-in lock-out, is raised at once as
    :class:`~ldpmarket_client.errors.TooManyRequests`).  Every other error answer is raised as the
    :class:`~ldpmarket_client.errors.ProblemError` subclass of its problem type.
    """

    def __init__(self, url: str | None = None, token: str | None = None, *, username: str | None = None,
                 password: str | None = None, timeout: float = 60.0, max_retries: int = 5,
                 max_retry_wait: float = 60.0, poll_interval: float = 1.0, progress: bool = True,
                 session: requests.Session | None = None, sleep: Callable[[float], None] = time.sleep):
        base = (url or DEFAULT_URL).rstrip("/")
        if base.endswith(API_PREFIX.rstrip("/")):
            base = base[: -len(API_PREFIX.rstrip("/"))]
        self.url = base
        self.api = base + API_PREFIX
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait
        self.poll_interval = poll_interval
        self.progress = progress
        self.session = session or requests.Session()
        self.session.headers.setdefault("Accept", "application/json")
        self.sleep = sleep
        self.token: str | None = None
        self.token_expiry: str | None = None
        if token:
            self.use_token(token)
        elif username is not None:
            try:
                self.login(username, password or "")
            except BaseException:
                self.close()
                raise

    def close(self) -> None:
        """Close the HTTP connections (``with Client(...) as client:`` does it at the end)."""
        self.session.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------- plumbing

    def _url(self, path: str) -> str:
        return urljoin(self.api, path)

    def request(self, method: str, path: str, *, retry: bool = True, **kwargs) -> requests.Response:
        """Send a request (``path`` relative to ``/api/v1/``, or absolute), retrying 429/503 after their
        ``Retry-After``; an error answer is raised as its typed problem."""
        kwargs.setdefault("timeout", self.timeout)
        url = self._url(path)
        attempt = 0
        while True:
            response = self.session.request(method, url, **kwargs)
            if response.status_code < 400:
                return response
            wait = _retry_after(response)
            problem = self._problem(response)
            response.close()  # its connection goes back to the pool
            if (retry and response.status_code in (429, 503) and attempt < self.max_retries
                    and wait is not None and wait <= self.max_retry_wait):
                attempt += 1
                self.sleep(wait)
                continue
            raise problem

    @staticmethod
    def _problem(response: requests.Response) -> errors.ProblemError:
        body: dict[str, Any] = {}
        try:
            parsed = response.json()
            if isinstance(parsed, dict):
                body = parsed
        except ValueError:
            pass
        status = body.get("status") if isinstance(body.get("status"), int) else response.status_code
        type_ = body.get("type") or errors.ABOUT_BLANK
        cls = errors.problem_class(type_, status)
        return cls(status=status, type=type_, title=body.get("title") or response.reason or "",
                   detail=body.get("detail") or ("" if body else _plain_text(response)), errors=body.get("errors"),
                   instance=body.get("instance"), body=body, retry_after=_retry_after(response),
                   request_id=_request_id(body, response))

    def _get(self, path: str, **params) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None}).json()

    def _pages(self, path: str, **params) -> Iterator[dict]:
        """Every result of a cursor-paginated list, following ``next``."""
        page = self._get(path, **params)
        while True:
            yield from page["results"]
            if not page.get("next"):
                return
            page = self.request("GET", page["next"]).json()

    # -------------------------------------------------------------------------------------------- sign-in

    def use_token(self, token: str) -> None:
        self.token = token
        self.session.headers["Authorization"] = f"Token {token}"

    def login(self, username: str, password: str) -> str:
        """Get a new token (``POST /api/v1/auth/token/``), use it from now on, and return it."""
        self.session.headers.pop("Authorization", None)
        body = self.request("POST", "auth/token/", json={"username": username, "password": password}).json()
        self.use_token(body["token"])
        self.token_expiry = body.get("expiry")
        return body["token"]

    def logout(self, *, everywhere: bool = False) -> None:
        """Revoke this token (``everywhere``: every token of the account)."""
        self.request("POST", "auth/logout-all/" if everywhere else "auth/logout/")
        self.session.headers.pop("Authorization", None)
        self.token = None

    # ------------------------------------------------------------------------------------------- catalog

    def datasets(self) -> list[dict]:
        """The catalog: every dataset with its attributes (kind, labels, epsilon grid, price, what is for sale)."""
        return list(self._pages("datasets/"))

    def dataset(self, dataset_id: int) -> dict:
        return self._get(f"datasets/{int(dataset_id)}/")

    # ---------------------------------------------------------------------------------- quotes, purchases

    @staticmethod
    def _body(attribute, epsilon, quote, params: dict) -> dict:
        if quote is not None:
            return {"quote": quote}
        if attribute is None:
            raise TypeError("give an attribute (and its epsilon or mechanism parameters) or a quote")
        body = {"attribute": int(attribute)}
        if epsilon is not None:
            body["epsilon"] = _number(epsilon)
        for key, value in params.items():
            if value is None:
                continue
            numeric = isinstance(value, (int, float, Decimal)) and key != "cohort"
            body[key] = _number(value) if numeric else value
        return body

    def quote(self, attribute: int, epsilon=None, **params) -> dict:
        """What a purchase would include and cost now, with a signed ``quote`` token (``POST /quotes/``).

        ``params``: ``cohort``, and one-shot parameters (``theta``, ``family``, ``eps1``, ``eps2``, ...)."""
        return self.request("POST", "quotes/", json=self._body(attribute, epsilon, None, params)).json()

    def buy(self, attribute: int | None = None, epsilon=None, *, quote: str | None = None,
            idempotency_key: str | None = None, wait: bool = True, timeout: float | None = None,
            progress: bool | None = None, **params) -> dict:
        """Buy ``attribute`` at ``epsilon`` (or what a ``quote`` token says, paying no more than it), and return
        the purchase.

        The ``Idempotency-Key`` is a new uuid4 unless given; the same key is sent again on every retry, so a
        purchase is made and charged once.  A large purchase answers 202 and runs in the background: with
        ``wait`` (the default) this polls it (a progress bar on stderr unless ``progress`` is false) until it
        has completed, and raises :class:`~ldpmarket_client.errors.PurchaseFailed` if it failed or
        :class:`~ldpmarket_client.errors.WaitTimeout` after ``timeout`` seconds.
        """
        key = idempotency_key or str(uuid.uuid4())
        response = self.request("POST", "purchases/", json=self._body(attribute, epsilon, quote, params),
                                headers={"Idempotency-Key": key})
        purchase = response.json()
        if response.status_code == 202 and wait:
            location = response.headers.get("Location") or f"purchases/{purchase['id']}/"
            return self._wait(urljoin(response.url, location), purchase, timeout=timeout, progress=progress)
        return purchase

    def purchase(self, purchase_id: int) -> dict:
        """One purchase: its status, ``progress`` while it runs, price and counts."""
        return self._get(f"purchases/{int(purchase_id)}/")

    def purchases(self, **filters) -> list[dict]:
        """Your purchases, newest first (``filters``: the API's query parameters, e.g. ``attribute=1``)."""
        return list(self._pages("purchases/", **filters))

    def wait(self, purchase_id: int, *, timeout: float | None = None, progress: bool | None = None) -> dict:
        """Poll a purchase until it has completed (see :meth:`buy`)."""
        return self._wait(self._url(f"purchases/{int(purchase_id)}/"), self.purchase(purchase_id),
                          timeout=timeout, progress=progress)

    def _wait(self, url: str, purchase: dict, *, timeout: float | None, progress: bool | None) -> dict:
        bar = _Progress(purchase.get("id"), self.progress if progress is None else progress)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while purchase.get("status") not in FINAL:
                done = purchase.get("progress") or {}
                bar.update(int(done.get("processed") or 0), int(done.get("total") or 0))
                if deadline is not None and time.monotonic() >= deadline:
                    raise errors.WaitTimeout(purchase, timeout)
                self.sleep(self.poll_interval)
                purchase = self.request("GET", url).json()
        finally:
            bar.close(purchase.get("status", "?"))
        if purchase["status"] == "failed":
            raise errors.PurchaseFailed(purchase)
        return purchase

    # --------------------------------------------------------------------------------- outputs, estimates

    def outputs_csv(self, purchase_id: int, out: IO[bytes] | None = None) -> bytes | None:
        """The outputs as CSV (streamed): written to the binary file ``out``, or returned as bytes."""
        response = self.request("GET", f"purchases/{int(purchase_id)}/outputs/", params={"format": "csv"},
                                headers={"Accept": "text/csv"}, stream=True)
        with response:
            if out is None:
                return response.content
            for chunk in response.iter_content(chunk_size=1 << 16):
                out.write(chunk)
        return None

    def outputs(self, purchase_id: int):
        """The outputs as a pandas DataFrame: a pseudonym per value, its epsilon and the randomized output
        (kept as strings). Needs pandas: ``pip install 'ldpmarket-client[pandas]'``."""
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise ImportError("outputs() needs pandas: pip install 'ldpmarket-client[pandas]' "
                              "(or outputs_csv() for the CSV itself)") from exc
        return pd.read_csv(io.BytesIO(self.outputs_csv(purchase_id)), dtype={"output": "string"})

    def estimate(self, purchase_id: int, *, method: str = "unbiased") -> dict:
        """Frequencies (or the mean): ``method="unbiased"`` (the default) with standard errors and 95% intervals;
        ``"norm_sub"`` or ``"ibu"`` consistent ones (non-negative, summing to 1; biased, so without intervals:
        docs/mechanisms-reference.md#consistent-estimates)."""
        if method == "unbiased":
            return self._get(f"purchases/{int(purchase_id)}/estimate/")
        return self._get(f"purchases/{int(purchase_id)}/estimate/", method=method)

    # ---------------------------------------------------------------------------------------------- money

    def account(self) -> dict:
        """Your money account: ``{"kind": "buyer_credit" | "owner_earnings", "currency", "balance"}``
        (``balance`` a decimal string)."""
        return self._get("account/")

    def statement(self, *, since: str | None = None, until: str | None = None) -> list[dict]:
        """Your account's movements, newest first: ``id``, ``created_at``, signed ``amount``,
        ``balance_after``, ``kind``, ``memo``, ``purchase`` (``since``/``until``: ISO 8601 bounds)."""
        return list(self._pages("account/statement/", since=since, until=until))
