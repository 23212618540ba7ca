"""A C2SP transparency-log witness (c2sp.org/tlog-witness) that anyone can run beside the service
(docs/client.md#running-a-witness, docs/receipts.md#witnesses).

``POST <prefix>/add-checkpoint`` takes an old size line, up to 63 consistency proof lines, an empty line and a
checkpoint signed by one of the trusted log keys; when the checkpoint is consistent with the latest one this
witness cosigned for its origin, it records it and answers with a timestamped Ed25519 cosignature (type 0x04,
c2sp.org/tlog-cosignature).  ``GET <prefix>/<sha256 hex of the origin>/checkpoint`` serves that latest cosigned
checkpoint (the log's verified signatures and the witness's cosignature).

State is one SQLite file: ``checkpoints`` holds, per origin, the latest cosigned size, root, cosignature time and
note; checking the old size and recording the new checkpoint happen in one ``BEGIN IMMEDIATE`` transaction (and
the write is an ``UPDATE ... WHERE size = <old>``), so two requests from the same old size cannot both win (the
race tlog-witness.md describes).  ``refused`` keeps each log-signed checkpoint refused as a possible fork (a
consistency proof that fails, the cosigned size with another root, even in a 409, or a size-0 checkpoint with
another root than the empty tree's), with the checkpoint cosigned then: together, the evidence of a fork.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import re
import socket
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import closing
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from . import __version__
from .tlog.checkpoint import Checkpoint, parse_checkpoint
from .tlog.merkle import EMPTY_ROOT, verify_consistency
from .tlog.note import (
    COSIGNATURE_V1,
    ED25519,
    InvalidNoteSignature,
    Note,
    NoteError,
    Signer,
    UnverifiedNote,
    Verifier,
    open_note,
    parse_note,
    parse_skey,
)

#: The most consistency proof lines a request may hold (tlog-witness.md).
MAX_PROOF_LINES = 63
#: The largest request body accepted (413 above): 63 proof lines and a checkpoint with many signatures fit.
MAX_BODY = 128 * 1024
#: Sizes are stored as SQLite integers.
MAX_SIZE = 2 ** 63 - 1
SIZE_CONTENT_TYPE = "text/x.tlog.size"
TEXT_CONTENT_TYPE = "text/plain; charset=utf-8"
_DECIMAL = re.compile(r"0|[1-9][0-9]*")

SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (
    origin    TEXT PRIMARY KEY,
    size      INTEGER NOT NULL CHECK (size >= 0),
    root      BLOB NOT NULL CHECK (length(root) = 32),
    timestamp INTEGER NOT NULL CHECK (timestamp > 0),
    note      BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS refused (
    id          INTEGER PRIMARY KEY,
    origin      TEXT NOT NULL,
    status      INTEGER NOT NULL,
    reason      TEXT NOT NULL,
    old_size    INTEGER NOT NULL,
    size        INTEGER NOT NULL,
    root        BLOB NOT NULL,
    note        BLOB NOT NULL,
    note_sha256 TEXT NOT NULL UNIQUE,
    request     BLOB NOT NULL,
    latest_note BLOB,
    first_seen  INTEGER NOT NULL,
    last_seen   INTEGER NOT NULL,
    times       INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS refused_origin ON refused (origin, first_seen);
"""


class WitnessError(Exception):
    """A refused request: its HTTP ``status`` and a one-line ``message`` (or, for 409, the size ``body``)."""

    def __init__(self, status: int, message: str, *, body: bytes | None = None,
                 content_type: str = TEXT_CONTENT_TYPE):
        super().__init__(message)
        self.status = status
        self.message = message
        self.body = body if body is not None else (message + "\n").encode()
        self.content_type = content_type


@dataclass(frozen=True)
class Request:
    """A parsed add-checkpoint body: the old size, the proof hashes and the signed checkpoint."""

    old_size: int
    proof: tuple[bytes, ...]
    note: Note
    checkpoint: Checkpoint


def origin_hash(origin: str) -> str:
    """The monitoring path's origin hash: SHA-256 of the origin, lowercase hex."""
    return hashlib.sha256(origin.encode()).hexdigest()


def parse_request(body: bytes) -> Request:
    """Split an add-checkpoint body (tlog-witness.md): ``old <size>``, proof lines, an empty line, a checkpoint.
    ``WitnessError(400)`` for anything malformed (no signature is checked here)."""
    head, sep, rest = body.partition(b"\n\n")
    if not sep:
        raise WitnessError(400, "the body is an old size line, proof lines, an empty line and a checkpoint")
    try:
        lines = head.decode("ascii").split("\n")
    except UnicodeDecodeError:
        raise WitnessError(400, "the old size and proof lines are ASCII") from None
    old, *proof_lines = lines
    if not old.startswith("old ") or not _DECIMAL.fullmatch(old[4:]):
        raise WitnessError(400, "the first line is 'old <size>', a decimal without leading zeroes")
    old_size = int(old[4:])
    if len(proof_lines) > MAX_PROOF_LINES:
        raise WitnessError(400, f"more than {MAX_PROOF_LINES} consistency proof lines")
    proof = []
    for line in proof_lines:
        try:
            digest = base64.b64decode(line, validate=True)
        except (binascii.Error, ValueError):
            digest = b""
        if len(digest) != 32:
            raise WitnessError(400, "a consistency proof line is one base64 SHA-256 hash")
        proof.append(digest)
    try:
        note = parse_note(rest)
        checkpoint = parse_checkpoint(note.text)
    except NoteError as exc:
        raise WitnessError(400, f"malformed checkpoint: {exc}") from None
    if old_size > MAX_SIZE or checkpoint.size > MAX_SIZE:
        raise WitnessError(400, f"tree sizes above {MAX_SIZE} are not supported")
    return Request(old_size, tuple(proof), note, checkpoint)


@dataclass(frozen=True)
class Refusal:
    """Why a log-signed checkpoint is not cosigned: the status, a reason, whether to ``keep`` it in ``refused``
    (possible evidence of a fork), and for 409 the latest cosigned ``size``."""

    status: int
    reason: str
    keep: bool = False
    size: int = 0

    def error(self) -> WitnessError:
        if self.status == 409:
            return WitnessError(409, self.reason, body=f"{self.size}\n".encode(), content_type=SIZE_CONTENT_TYPE)
        return WitnessError(self.status, self.reason)


def check_alone(req: Request) -> Refusal | None:
    """The checks of a log-signed request that need no state (tlog-witness.md#add-checkpoint)."""
    cp = req.checkpoint
    if req.old_size > cp.size:
        return Refusal(400, f"old size {req.old_size} is above the checkpoint size {cp.size}")
    if cp.size == 0 and cp.root != EMPTY_ROOT:
        return Refusal(422, "a checkpoint of size 0 whose root is not the empty tree's", keep=True)
    if req.old_size == 0 and req.proof:
        return Refusal(422, "the consistency proof from old size 0 must be empty")
    return None


def check_against(req: Request, size: int, root: bytes | None) -> Refusal | None:
    """The checks of a log-signed request against the latest cosigned ``size`` and ``root`` (0 and ``None``
    when none was cosigned): 409 for another old size, 422 for an inconsistent checkpoint."""
    cp = req.checkpoint
    if req.old_size != size:
        if root is not None and cp.size == size and cp.root != root:
            return Refusal(409, f"old size {req.old_size} is not the latest cosigned size {size}; and the "
                                f"checkpoint has that size but another root (a fork)", keep=True, size=size)
        return Refusal(409, f"old size {req.old_size} is not the latest cosigned size {size}", size=size)
    if req.old_size == cp.size:
        if root is not None and cp.root != root:
            return Refusal(422, f"the checkpoint has the cosigned size {size} but another root (a fork)", keep=True)
        if req.proof:
            return Refusal(422, "the consistency proof between equal sizes must be empty")
    elif req.old_size > 0 and not verify_consistency(req.old_size, cp.size, root, cp.root, req.proof):
        return Refusal(422, f"the consistency proof from size {req.old_size} to {cp.size} does not verify",
                       keep=True)
    return None


class Witness:
    """The witness's state and its add-checkpoint and monitoring answers, without HTTP.

    ``signer`` is the witness's type 0x04 key; ``logs`` the trusted log keys (type 0x01), each trusted for the
    origin equal to its key name; ``db`` the SQLite file.  ``clock`` gives POSIX seconds; ``log`` receives one
    line per refused request that carries a valid log signature (the command line prints them on stderr)."""

    def __init__(self, signer: Signer, logs: Iterable[Verifier], db: str | Path, *,
                 clock: Callable[[], float] = time.time, log: Callable[[str], None] | None = None,
                 vet: Callable[[Checkpoint], str | None] | None = None):
        if signer.sig_type != COSIGNATURE_V1:
            raise ValueError("a witness key is a type 0x04 (timestamped Ed25519 cosignature) key")
        self.signer = signer
        self.logs: dict[str, list[Verifier]] = {}
        for verifier in logs:
            if verifier.sig_type != ED25519:
                raise ValueError(f"the log key {verifier.vkey} is not an Ed25519 (type 0x01) key")
            self.logs.setdefault(verifier.name, []).append(verifier)
        self.origins = {origin_hash(origin): origin for origin in self.logs}
        self.db = str(db)
        self.clock = clock
        self.log = log or (lambda line: None)
        #: An extra check of what the log says (the monitor's, ``ldpmarket_client.monitor``): the reason to refuse
        #: (422, kept as evidence), or ``None``; run before the state is read, on log-signed checkpoints only.
        self.vet = vet
        with closing(self._connect()) as conn:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.executescript(SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        """A connection in autocommit mode (transactions are begun explicitly), waiting up to 30 s for a lock."""
        conn = sqlite3.connect(self.db, timeout=30, isolation_level=None)
        conn.execute("PRAGMA synchronous = FULL")  # persisted before the answer (tlog-witness.md)
        return conn

    def _cosign(self, text: bytes, timestamp: int) -> str:
        """The witness's cosignature line over a checkpoint text (called inside the recording transaction)."""
        return self.signer.signature_line(text, timestamp)

    def add_checkpoint(self, body: bytes) -> bytes:
        """Answer an add-checkpoint request (tlog-witness.md#add-checkpoint): the cosignature line, or
        ``WitnessError`` with the status the specification gives."""
        req = parse_request(body)
        cp = req.checkpoint
        trusted = self.logs.get(cp.origin)
        if trusted is None:
            raise WitnessError(404, f"unknown log origin {cp.origin!r}")
        try:
            note = open_note(req.note, trusted)
        except InvalidNoteSignature as exc:
            raise WitnessError(403, str(exc)) from None
        except UnverifiedNote:
            raise WitnessError(403, f"no signature of a trusted key for {cp.origin}") from None
        # The checkpoint is signed by the log from here on: a refusal is logged (and kept if it may be a fork).
        # ``signed``: the checkpoint with the log signatures that verified (others, e.g. cosignatures, dropped).
        signed = note.text + b"\n" + "".join(sig.line for _, _, sig in note.verified).encode()
        refusal = check_alone(req)
        if refusal is None and self.vet is not None:
            reason = self.vet(cp)
            if reason is not None:
                refusal = Refusal(422, reason, keep=True)
        if refusal is not None:
            if refusal.keep:
                with closing(self._connect()) as conn:
                    self._keep(conn, req, signed, body, refusal, None)
            raise self._refused(req, refusal)
        with closing(self._connect()) as conn:
            conn.execute("BEGIN IMMEDIATE")  # the write lock, taken before the old size is read
            try:
                row = conn.execute("SELECT size, root, timestamp, note FROM checkpoints WHERE origin = ?",
                                   (cp.origin,)).fetchone()
                size, root, last_time, latest = row or (0, None, 0, None)
                refusal = check_against(req, size, root)
                if refusal is None:
                    timestamp = max(int(self.clock()), last_time, 1)  # never 0, never before an earlier one
                    line = self._cosign(note.text, timestamp)
                    values = (cp.size, cp.root, timestamp, signed + line.encode())
                    if row is None:
                        conn.execute("INSERT INTO checkpoints (size, root, timestamp, note, origin) "
                                     "VALUES (?, ?, ?, ?, ?)", (*values, cp.origin))
                    elif conn.execute("UPDATE checkpoints SET size = ?, root = ?, timestamp = ?, note = ? "
                                      "WHERE origin = ? AND size = ?",
                                      (*values, cp.origin, req.old_size)).rowcount != 1:
                        raise RuntimeError("the latest checkpoint changed inside the transaction")
                elif refusal.keep:
                    self._keep(conn, req, signed, body, refusal, latest)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        if refusal is not None:
            raise self._refused(req, refusal)
        return line.encode()

    def _refused(self, req: Request, refusal: Refusal) -> WitnessError:
        """Log a refused log-signed request (possible evidence of the log misbehaving); the error to raise."""
        cp = req.checkpoint
        self.log(f"witness: refused ({refusal.status}) a checkpoint signed by {cp.origin}: {refusal.reason} "
                 f"(old size {req.old_size}, size {cp.size}, root {base64.b64encode(cp.root).decode()})")
        return refusal.error()

    def _keep(self, conn: sqlite3.Connection, req: Request, signed: bytes, body: bytes, refusal: Refusal,
              latest: bytes | None) -> None:
        """Keep a refused checkpoint in ``refused``: the log-signed note, the request, and the latest cosigned
        note then (the other half of a fork); one row per signed note, counting repeats."""
        now = max(int(self.clock()), 1)
        cp = req.checkpoint
        conn.execute("INSERT INTO refused (origin, status, reason, old_size, size, root, note, note_sha256, "
                     "request, latest_note, first_seen, last_seen) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                     "ON CONFLICT (note_sha256) DO UPDATE SET last_seen = excluded.last_seen, times = times + 1",
                     (cp.origin, refusal.status, refusal.reason, req.old_size, cp.size, cp.root, signed,
                      hashlib.sha256(signed).hexdigest(), body, latest, now, now))

    def latest(self, origin: str) -> tuple[int, bytes, bytes] | None:
        """The latest cosigned ``(size, root, note)`` of ``origin``, or ``None``."""
        with closing(self._connect()) as conn:
            return conn.execute("SELECT size, root, note FROM checkpoints WHERE origin = ?", (origin,)).fetchone()

    def checkpoint(self, hash_hex: str) -> bytes:
        """The monitoring answer (tlog-witness.md#monitor-retrieval-mechanism): the latest cosigned checkpoint
        of the origin whose SHA-256 is ``hash_hex``; ``WitnessError(404)`` if none was cosigned."""
        origin = self.origins.get(hash_hex)
        latest = self.latest(origin) if origin else None
        if latest is None:
            raise WitnessError(404, "this witness has cosigned no checkpoint of that log")
        return latest[2]

    def refusals(self, origin: str | None = None) -> list[dict]:
        """The refused checkpoints kept as possible evidence, oldest first."""
        with closing(self._connect()) as conn:
            return refusals(conn, origin)


def refusals(conn: sqlite3.Connection, origin: str | None = None) -> list[dict]:
    """The rows of ``refused`` (of ``origin``, or all), oldest first, with notes and the request as text."""
    conn.row_factory = sqlite3.Row
    rows = conn.execute("SELECT * FROM refused WHERE ? IS NULL OR origin = ? ORDER BY first_seen, id",
                        (origin, origin)).fetchall()
    out = []
    for row in rows:
        item = dict(row)
        item["root"] = base64.b64encode(item["root"]).decode()
        for key in ("note", "request", "latest_note"):
            if item[key] is not None:
                item[key] = item[key].decode("utf-8", "replace")
        out.append(item)
    return out


class WitnessHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive (tlog-witness.md#http-interface): ``POST <prefix>/add-checkpoint`` and
    ``GET <prefix>/<origin hash>/checkpoint``; 404 for other paths, 405 for other methods, 411 without a
    ``Content-Length``, 413 above ``MAX_BODY``."""

    protocol_version = "HTTP/1.1"
    server_version = f"ldpmarket-witness/{__version__}"
    timeout = 60  # seconds a connection may stay idle (or a slow request take) before it is closed
    server: WitnessServer

    def _send(self, status: int, body: bytes, content_type: str = TEXT_CONTENT_TYPE, *, allow: str | None = None,
              head: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if allow:
            self.send_header("Allow", allow)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _error(self, status: int, message: str, **kwargs) -> None:
        self._send(status, (message + "\n").encode(), **kwargs)

    def _route(self) -> tuple[str, str | None] | None:
        """``("add", None)``, ``("checkpoint", origin hash)``, or ``None`` for a path served by nothing."""
        path = self.path.split("?", 1)[0]
        prefix = self.server.prefix
        if not path.startswith(prefix + "/"):
            return None
        rest = path[len(prefix):]
        if rest == "/add-checkpoint":
            return "add", None
        match = re.fullmatch(r"/([0-9a-f]{64})/checkpoint", rest)
        return ("checkpoint", match.group(1)) if match else None

    def _body_length(self) -> int | None:
        """The declared body length; ``None`` (and the connection closed) when none usable is declared."""
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            return None
        value = self.headers.get("Content-Length", "0")
        if not value.isascii() or not value.isdigit():
            self.close_connection = True
            return None
        return int(value)

    def _skip_body(self) -> None:
        """Read and drop a body not used (so the connection can be kept), or close the connection."""
        length = self._body_length()
        if length is None or length > MAX_BODY:
            self.close_connection = True
        elif length:
            self.rfile.read(length)

    def handle_expect_100(self) -> bool:
        """Refuse a too large body before the client sends it."""
        value = self.headers.get("Content-Length", "")
        if value.isascii() and value.isdigit() and int(value) > MAX_BODY:
            self.close_connection = True
            self._error(413, f"the body is limited to {MAX_BODY} bytes")
            return False
        return super().handle_expect_100()

    def _not_allowed(self) -> None:
        route = self._route()
        self._skip_body()
        if route is None:
            self._error(404, "not found", head=self.command == "HEAD")
        else:
            allow = "POST" if route[0] == "add" else "GET, HEAD"
            self._error(405, f"{self.command} is not allowed here", allow=allow, head=self.command == "HEAD")

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _not_allowed

    def do_GET(self, head: bool = False) -> None:
        route = self._route()
        if route is None or route[0] != "checkpoint":
            return self._not_allowed()
        self._skip_body()
        try:
            self._send(200, self.server.witness.checkpoint(route[1]), head=head)
        except WitnessError as exc:
            self._send(exc.status, exc.body, exc.content_type, head=head)

    def do_HEAD(self) -> None:
        self.do_GET(head=True)

    def do_POST(self) -> None:
        route = self._route()
        if route is None or route[0] != "add":
            return self._not_allowed()
        length = self._body_length()
        if length is None:
            return self._error(411, "send the body with a Content-Length")
        if length > MAX_BODY:
            self.close_connection = True
            return self._error(413, f"the body is limited to {MAX_BODY} bytes")
        body = self.rfile.read(length)
        if len(body) != length:
            self.close_connection = True
            return
        try:
            self._send(200, self.server.witness.add_checkpoint(body))
        except WitnessError as exc:
            self._send(exc.status, exc.body, exc.content_type)
        except Exception as exc:  # a bug or a broken database: never a cosignature
            self.log_error("add-checkpoint failed: %r", exc)
            self.close_connection = True
            self._error(500, "internal error")


class WitnessServer(ThreadingHTTPServer):
    """A thread per connection; ``witness`` answers, under the URL ``prefix`` (``""`` for the root)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], witness: Witness, prefix: str = ""):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.witness = witness
        self.prefix = prefix.rstrip("/")
        if self.prefix and not self.prefix.startswith("/"):
            self.prefix = "/" + self.prefix
        super().__init__(address, WitnessHandler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}{self.prefix}"


def parse_listen(listen: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:7380`` for IPv6; port 0 picks a free one)."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--listen {listen!r} is not host:port")
    return host.strip("[]"), int(port)


def load_signer(path: str | Path) -> Signer:
    """The witness key from a key file (``witness keygen``): a type 0x04 signer key."""
    signer = parse_skey(Path(path).read_text(encoding="ascii"))
    if signer.sig_type != COSIGNATURE_V1:
        raise NoteError(f"{path} holds a type 0x{signer.sig_type:02x} key, not a witness (type 0x04) key")
    return signer


def stderr_log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def serve(witness: Witness, listen: str = "127.0.0.1:7380", prefix: str = "",
          ready: Callable[[WitnessServer], None] | None = None) -> None:
    """Serve until interrupted; ``ready`` is called once the socket listens."""
    server = WitnessServer(parse_listen(listen), witness, prefix)
    try:
        stderr_log(f"witness {witness.signer.verifier.vkey} listening on {server.url}/ for the logs "
                   f"{', '.join(sorted(witness.logs))}")
        if ready:
            ready(server)
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def serve_in_thread(witness: Witness, listen: str = "127.0.0.1:0", prefix: str = "") -> WitnessServer:
    """A server answering from a daemon thread (tests, embedding); stop it with ``shutdown()`` and
    ``server_close()``."""
    server = WitnessServer(parse_listen(listen), witness, prefix)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
