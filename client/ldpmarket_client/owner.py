"""The owner SDK: contribute values whose raw value never leaves this machine (docs/custody.md).

    from ldpmarket_client.owner import Owner

    owner = Owner("http://127.0.0.1:8000", token="...", state="~/ldpmarket-owner.json")
    owner.contribute(attribute=3, value="green", ceiling="1", upload_to="2")   # chain up to 2, drawn here
    owner.extend()          # later (a scheduler): continue every chain up to its value's current ceiling
    owner.status()          # the service's view of your values, with what the state file holds

An *owner-held* value is contributed without its raw value (``POST /api/v1/owner/values/`` with ``custody:
owner``).  This machine draws the value's gradual-release chain itself with
:mod:`ldpmarket_client.sampler` (the service's exact sampler, from the OS CSPRNG): k-RR at the attribute's grid
start, then one relaxation step per grid point up to the *upload level*, and uploads only the epsilons and
outputs (``POST /api/v1/owner/values/{id}/chain/``).  The service then holds an upload-level view of the value
and nothing more; growing the chain above it needs this machine again (:meth:`Owner.extend`).

**Numeric and string values** (docs/custody.md).  A number is discretized once, here, when the service has made
the value (:func:`ldpmarket_client.sampler.discretize`: ``z`` = 1 (high) with probability ``(x - low)/(high -
low)``); ``z`` is kept in the state file, never sent, and the chain uploaded is ``z``'s binary chain.  A string is
hashed here into its Bloom filter (the attribute's ``num_bits`` and ``num_hashes``, the value's ``cohort``, which the
service chose) and each bit's chain is drawn at ``epsilon / draw_divisor``; the upload carries one text of
``num_bits`` characters 0/1 per epsilon.  Neither the number, nor ``z``, nor the string, nor its Bloom filter is
sent.

**The state file** (``state``; the CLI's default is ``owner-state.json`` in the user's data directory) holds, per
value, the raw value (and a number's ``z``), the chain's head (its last epsilon and output) and the points drawn
but not yet acknowledged by the service.  It is the only copy of the raw value: keep it (and back it up) like a
key.  It is created readable by the user only (0600) and always replaced atomically (a temporary file, then
``os.replace``).  Drawn points are saved *before* they are sent and re-sent unchanged after a failure, so the
service never sees two different draws at one epsilon.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from decimal import ROUND_FLOOR, Context, Decimal, InvalidOperation
from pathlib import Path

import platformdirs

from . import sampler
from .client import Client, _number
from .errors import ClientError, ProblemError

#: Micro-epsilons: the service stores epsilons with 6 decimals.
MICRO = 10 ** 6
STATE_FORMAT = "ldpmarket-owner-state"
STATE_VERSION = 1
_DRAW = Context(prec=40, rounding=ROUND_FLOOR)


class OwnerError(ClientError, ValueError):
    """A request the owner SDK refuses before asking the service, or a state file that does not match it."""


def default_state_path() -> Path:
    """``$LDPMARKET_OWNER_STATE``, else ``owner-state.json`` in the user's data directory."""
    value = os.environ.get("LDPMARKET_OWNER_STATE")
    if value:
        return Path(value).expanduser()
    return Path(platformdirs.user_data_dir("ldpmarket-client", appauthor=False)) / "owner-state.json"


# ---------------------------------------------------------------- epsilons and the grid

def to_micro(value, name: str = "epsilon") -> int:
    """An epsilon (decimal string, Decimal or int) as exact micro-epsilons; refuses more than 6 decimals."""
    try:
        d = value if isinstance(value, Decimal) else Decimal(str(_number(value)).strip())
    except (InvalidOperation, TypeError):
        raise OwnerError(f"{name} must be a decimal number, got {value!r}") from None
    if not d.is_finite() or d < 0:
        raise OwnerError(f"{name} must be a non-negative number, got {value!r}")
    micro = d.scaleb(6)
    if micro != micro.to_integral_value():
        raise OwnerError(f"{name} may have at most 6 decimal places, got {value!r}")
    return int(micro)


def epsilon_text(micro: int) -> str:
    """Micro-epsilons as the exact decimal the service draws at (``market.chains.draw_epsilon``): ``"0.1"``."""
    return str(_DRAW.divide(Decimal(int(micro)), MICRO))


class Grid:
    """An attribute's epsilon grid in micro-epsilons: the points ``start + k step <= stop``."""

    def __init__(self, start: int, step: int, stop: int):
        if start <= 0 or step <= 0 or stop < start:
            raise OwnerError(f"not an epsilon grid: start {start}, step {step}, stop {stop} (micro-epsilons)")
        self.start, self.step, self.stop = start, step, stop

    @classmethod
    def of(cls, grid: dict) -> Grid:
        return cls(to_micro(grid["start"]), to_micro(grid["step"]), to_micro(grid["stop"]))

    def on_grid(self, e: int) -> bool:
        return e >= self.start and (e - self.start) % self.step == 0

    def last_point_upto(self, limit: int) -> int:
        """The largest grid point at or below ``min(limit, stop)``; the grid start when ``limit`` is below it."""
        return self.start + max((min(limit, self.stop) - self.start) // self.step, 0) * self.step

    def next_point_after(self, e: int) -> int:
        return self.start + ((e - self.start) // self.step + 1) * self.step if e >= self.start else self.start

    def upload_points(self, head: int | None, target: int) -> list[int]:
        """The points of the next upload (docs/custody.md#uploads): every grid point from the grid start (first
        upload) or the one after ``head`` up to ``target``, and ``target`` itself when it lies between grid
        points (the upload level).  Empty when ``target`` is not above ``head``."""
        if target > self.stop:
            raise OwnerError(f"the upload level {epsilon_text(target)} is above the attribute's cap "
                             f"{epsilon_text(self.stop)}")
        if head is not None and target <= head:
            return []
        first = self.start if head is None else self.next_point_after(head)
        if target < first:
            where = "the grid start" if head is None else f"the grid point after the head {epsilon_text(head)}"
            raise OwnerError(f"the upload level {epsilon_text(target)} must reach {where}, {epsilon_text(first)}")
        points = list(range(first, min(target, self.stop) + 1, self.step))
        if not self.on_grid(target):
            points.append(target)
        return points


# ---------------------------------------------------------------- the state file

class StateFile:
    """The owner's local JSON state: raw values, chain heads, points awaiting the service's acknowledgement."""

    def __init__(self, path, url: str):
        self.path = Path(path).expanduser()
        self.url = url

    @contextlib.contextmanager
    def locked(self):
        """Hold an advisory lock on ``<state>.lock`` (POSIX ``flock``), so that two runs (a scheduler and a
        manual one, say) never draw for the same value at once; no lock where ``fcntl`` is missing."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            yield
            return
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def load(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {"format": STATE_FORMAT, "version": STATE_VERSION, "url": self.url, "values": {},
                    "contributing": {}}
        except (OSError, ValueError) as exc:
            raise OwnerError(f"cannot read the owner state file {self.path}: {exc}") from None
        if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
            raise OwnerError(f"{self.path} is not an ldpmarket owner state file")
        if data.get("version") != STATE_VERSION:
            raise OwnerError(f"{self.path} has state format version {data.get('version')}; this client reads "
                             f"version {STATE_VERSION}")
        if data.get("url") != self.url:
            raise OwnerError(f"{self.path} holds values of {data.get('url')}, not of {self.url}: use another "
                             "state file for this service")
        data.setdefault("values", {})
        data.setdefault("contributing", {})
        return data

    def save(self, data: dict) -> None:
        """Replace the file atomically with ``data``, readable and writable by the user only (0600)."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=2, ensure_ascii=False)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        with contextlib.suppress(OSError):  # the rename itself durable (POSIX; not possible everywhere)
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)


# ---------------------------------------------------------------- the SDK

class Owner:
    """An owner of one ldpmarket service, keeping raw values in a local state file (module docstring).

    ``url``, ``token`` (or ``username`` and ``password``), ``session`` and the other keyword arguments are those
    of :class:`~ldpmarket_client.Client`, whose HTTP conventions (retries, typed problem errors) this uses;
    ``state`` is the state file's path (default :func:`default_state_path`); ``words`` a source of uniform
    64-bit words for the sampler (default: the OS CSPRNG; tests pass a seeded one).
    """

    def __init__(self, url: str | None = None, token: str | None = None, *, state=None, words=None,
                 client: Client | None = None, **client_kwargs):
        self.client = client or Client(url, token, **client_kwargs)
        self.state = StateFile(state or default_state_path(), self.client.url)
        self.words = words

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Owner:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # ------------------------------------------------------------------------------------ the service's view

    def value(self, value_id: int) -> dict:
        """The service's view of one of your values (``GET /api/v1/owner/values/{id}/``)."""
        return self.client._get(f"owner/values/{int(value_id)}/")

    def values(self) -> list[dict]:
        """The service's view of all your values, newest first."""
        return list(self.client._pages("owner/values/"))

    def status(self) -> list[dict]:
        """Every value the service or the state file knows: the service's view (``null`` for a value only the
        state file has) with ``local``: what the state file holds (``null`` for a value held elsewhere), its
        ``head`` and ``pending`` points, and ``in_sync`` (the service's head is the state file's)."""
        data = self.state.load()
        out = []
        for server in self.values():
            entry = data["values"].get(str(server["id"]))
            out.append({**server, "local": None if entry is None else self._local(entry, server)})
        known = {row["id"] for row in out}
        for key, entry in data["values"].items():
            if int(key) not in known:
                out.append({"id": int(key), "attribute": entry["attribute"], "server": None,
                            "local": self._local(entry, None)})
        return out

    @staticmethod
    def _local(entry: dict, server: dict | None) -> dict:
        head = entry.get("head")
        in_sync = server is not None and _same_head(server.get("head"), head)
        return {"value": entry["value"], "head": head, "pending": entry.get("pending"), "in_sync": in_sync}

    # ----------------------------------------------------------------------------------------- contribute

    def contribute(self, attribute: int, value, *, ceiling, upload_to=None) -> dict:
        """Contribute ``value`` (one of the attribute's labels; a number in ``[low, high]`` for a numeric
        attribute, a text for a string attribute) for ``attribute`` with a fixed ``ceiling``, held on this machine:
        the service receives no raw value, only the chain drawn here from the grid start up to ``upload_to``
        (default: the ceiling's last grid point; it may be above the ceiling, docs/custody.md "Pre-generating
        costs nothing").  Returns the service's view of the value after the upload.  Refused
        (:class:`OwnerError`, nothing sent) when you already have a value of ``attribute``, here or elsewhere:
        the service keeps one per owner and attribute."""
        attribute = int(attribute)
        label = value if isinstance(value, str) else _number(value)
        ceiling_text = _number(ceiling)
        to_micro(ceiling_text, "ceiling")
        target = None if upload_to is None else to_micro(upload_to, "upload_to")
        with self.state.locked():
            return self._contribute(attribute, label, ceiling_text, target)

    def _contribute(self, attribute: int, label: str, ceiling_text: str, target: int | None) -> dict:
        data = self.state.load()
        if any(e["attribute"] == attribute for e in data["values"].values()):
            raise OwnerError(f"the state file already holds your value for attribute {attribute}: use extend")
        # One value per owner and attribute (the service's rule): a value of yours the state file does not hold
        # (another device or state file, the browser) is refused here, saying which, before anything is made.
        for server in self.values():
            if server["attribute"] == attribute:
                raise OwnerError(self._already(data, server))
        found = self._catalog_attribute(attribute)  # checked before anything is made on the service
        if found is not None:
            labels = [str(x) for x in found.get("labels") or []]
            if found.get("kind") == "numeric" and found.get("bounds"):
                _check_number(label, found["bounds"]["low"], found["bounds"]["high"], attribute)
            elif found.get("kind") == "string":
                _check_text(label, attribute)
            elif labels and label not in labels:
                raise OwnerError(f"{label!r} is not a label of attribute {attribute}: one of {labels}")
            if target is not None and found.get("grid"):
                Grid.of(found["grid"]).upload_points(None, target)
        # Saved before asking the service, so a contribution whose answer is lost can be adopted later.
        data["contributing"][str(attribute)] = {"value": label, "ceiling": ceiling_text}
        self.state.save(data)
        try:
            created = self.client.request("POST", "owner/values/", json={
                "attribute": attribute, "custody": "owner", "ceiling": ceiling_text}).json()
        except ProblemError:  # refused: nothing was made
            data["contributing"].pop(str(attribute), None)
            self.state.save(data)
            raise
        entry = self._adopt(data, created, label)
        return self._grow(data, entry, created, target)[0]

    def _already(self, data: dict, server: dict) -> str:
        """Why a contribution to ``server``'s attribute is refused: you have ``server`` there already."""
        text = (f"you already contribute a value to {server.get('attribute_name') or server['attribute']} "
                f"(value {server['id']}); one value per attribute: ")
        if server.get("custody") != "owner":
            return text + ("the service holds it (contributed in the browser, or with custody service) and grows its "
                           "chain itself: change its ceiling on the owner portal")
        if str(server["attribute"]) in data["contributing"] and server.get("head") is None:
            return text + ("it is the contribution from this state file whose answer was lost: run `owner extend` "
                           "to adopt it and upload its chain")
        return text + (f"it is not in the state file {self.state.path}, so it was contributed from another device "
                       "or state file, or in the browser: use `owner extend` there, with the state file that holds it")

    def held_elsewhere(self) -> list[dict]:
        """Your owner-held values on the service that the state file does not hold (contributed from another
        device or state file, or in the browser): this machine cannot extend them.  The service's view of each,
        with ``reason``: why."""
        data = self.state.load()
        return [{**server, "reason": self._not_here(server)} for server in self.values()
                if server.get("custody") == "owner" and str(server["id"]) not in data["values"]]

    def _not_here(self, server: dict) -> str:
        return (f"not in the state file {self.state.path}: it was contributed from another device or state file, or "
                "in the browser; extend it where its state file is (`owner --state FILE extend`)")

    def _cannot_extend(self, value_id: int) -> OwnerError:
        """Why the value ``value_id``, which the state file does not hold, cannot be extended here."""
        try:
            server = self.value(value_id)
        except ProblemError as exc:
            if exc.status == 404:
                return OwnerError(f"you have no value {value_id}")
            raise
        name = f"value {value_id} ({server.get('attribute_name') or server['attribute']})"
        if server.get("custody") != "owner":
            return OwnerError(f"{name} is held by the service, which grows its chain itself: nothing to extend")
        return OwnerError(f"{name}: {self._not_here(server)}")

    def _catalog_attribute(self, attribute: int) -> dict | None:
        """The attribute as the catalog shows it (labels, grid), or ``None`` if it is not there (the service
        then decides)."""
        for dataset in self.client._pages("datasets/"):
            for a in dataset.get("attributes", []):
                if a.get("id") == attribute:
                    return a
        return None

    def _adopt(self, data: dict, server: dict, label: str) -> dict:
        """Record a value the service made (the answer to a contribution) with its raw value, in the state file."""
        if server.get("custody") != "owner":
            raise OwnerError(f"value {server['id']} is held by the service, not by this machine")
        labels = [str(x) for x in server["labels"]]
        kind = server.get("kind") or "categorical"
        entry = {"attribute": server["attribute"], "attribute_name": server.get("attribute_name"), "kind": kind,
                 "labels": labels, "m": int(server["m"]), "grid": server["grid"], "value": label,
                 "head": None, "pending": None}
        refused = None
        if kind == "numeric":
            entry.update(low=server["low"], high=server["high"], z=None)
            try:
                _check_number(label, server["low"], server["high"], server["attribute"], entry)
            except OwnerError as exc:
                refused = exc
            else:  # discretized once, here, and kept: never drawn again, never sent (docs/custody.md)
                entry["z"] = sampler.discretize(label, server["low"], server["high"], self.words)
        elif kind == "string":
            entry.update(num_bits=int(server["num_bits"]), num_hashes=int(server["num_hashes"]),
                         cohort=int(server["cohort"]), draw_divisor=int(server["draw_divisor"]))
        data["values"][str(server["id"])] = entry
        data["contributing"].pop(str(server["attribute"]), None)
        self.state.save(data)
        if refused is not None:
            raise refused
        if kind == "string":
            _check_text(label, server["attribute"])
        elif kind != "numeric" and label not in labels:
            raise OwnerError(f"{label!r} is not a label of attribute {server['attribute']} (labels {labels}); "
                             f"value {server['id']} was made without a chain")
        return entry

    # -------------------------------------------------------------------------------------------- extend

    def extend(self, value_id: int | None = None, upload_to=None) -> list[dict]:
        """Continue the chain of each value this machine holds (or only ``value_id``) from its stored head up
        to ``upload_to`` (default: the value's current ceiling's last grid point), drawing here and uploading
        the new points; points saved but not yet acknowledged by the service are sent first, unchanged.

        Returns one result per value: ``{"id", "uploaded": [epsilons], "value": the service's view}``, or
        ``{"id", "error": message}`` for a value that could not be extended (when ``value_id`` is given, that
        error is raised instead)."""
        target = None if upload_to is None else to_micro(upload_to, "upload_to")
        with self.state.locked():
            return self._extend(None if value_id is None else int(value_id), target)

    def _extend(self, value_id: int | None, target: int | None) -> list[dict]:
        data = self.state.load()
        if data["contributing"]:
            self._adopt_lost(data)
        ids = list(data["values"]) if value_id is None else [str(value_id)]
        results = []
        for key in ids:
            entry = data["values"].get(key)
            if entry is None:
                raise self._cannot_extend(int(key))
            try:
                server, uploaded = self._grow(data, entry, self.value(int(key)), target)
                results.append({"id": int(key), "uploaded": uploaded, "value": server})
            except (ClientError, ValueError) as exc:
                if value_id is not None:
                    raise
                results.append({"id": int(key), "error": str(exc)})
        return results

    def _adopt_lost(self, data: dict) -> None:
        """Adopt contributions whose answer was lost: a value of yours for that attribute the service holds for
        you without a chain, and the state file does not know yet."""
        known = {int(k) for k in data["values"]}
        for server in self.values():
            pending = data["contributing"].get(str(server["attribute"]))
            if pending and server["id"] not in known and server.get("custody") == "owner" and server["head"] is None:
                self._adopt(data, server, pending["value"])

    def _grow(self, data: dict, entry: dict, server: dict, target: int | None) -> tuple[dict, list[str]]:
        """Send the pending points, then draw and send the points from the head up to ``target``; the service's
        view of the value afterwards and the epsilons sent."""
        value_id = int(server["id"])
        sent: list[str] = []
        if entry.get("pending"):
            sent += entry["pending"]["epsilons"]
            server = self._send_pending(data, entry, server)
        if not _same_head(server.get("head"), entry.get("head")):
            raise OwnerError(f"value {value_id}: the service's chain ends at {server.get('head')}, the state file's "
                             f"at {(entry.get('head') or {}).get('epsilon')}: it was grown elsewhere (another "
                             "device or state file); this one cannot continue it")
        grid = Grid.of(entry["grid"])
        if target is None:
            target = grid.last_point_upto(to_micro(server["ceiling"], "ceiling"))
        head = entry.get("head")
        points = grid.upload_points(None if head is None else to_micro(head["epsilon"]), target)
        if not points:
            return server, sent
        epsilons = [epsilon_text(p) for p in points]
        outputs = self._draw(entry, head, epsilons)
        entry["pending"] = {"epsilons": epsilons, "outputs": outputs}
        self.state.save(data)  # before sending: a retry re-sends these very points
        return self._send_pending(data, entry, server), sent + epsilons

    def _draw(self, entry: dict, head: dict | None, epsilons: list[str]) -> list:
        """The outputs of the chain's next points: label indices (categorical, binary), the bits of ``z``'s chain
        (numeric), or texts of the Bloom bits' outputs (string, docs/custody.md#uploads)."""
        kind = entry.get("kind") or "categorical"
        if kind == "string":
            if not entry["value"] or len(entry["value"]) > MAX_STRING:
                raise OwnerError(f"value of attribute {entry['attribute']}: not a text of 1 to {MAX_STRING} characters")
            bits = sampler.bloom_bits(entry["value"], int(entry["cohort"]), int(entry["num_bits"]),
                                      int(entry["num_hashes"]))
            divisor = int(entry["draw_divisor"])
            if head is None:
                rows = sampler.bits_chain(bits, epsilons, divisor, self.words)
            else:
                rows = sampler.extend_bits_chain(bits, head["epsilon"], [int(c) for c in head["output"]], epsilons,
                                                 divisor, self.words)
            return ["".join(str(b) for b in row) for row in rows]
        if kind == "numeric":
            if entry.get("z") not in (0, 1):
                raise OwnerError(f"value of attribute {entry['attribute']}: {entry['value']!r} was never discretized "
                                 f"(not a number in [{entry['low']}, {entry['high']}])")
            value, m = int(entry["z"]), 2
        else:
            value, m = entry["labels"].index(entry["value"]), int(entry["m"])
        if head is None:
            return sampler.chain(value, [Decimal(e) for e in epsilons], m, self.words)
        return sampler.extend_chain(value, Decimal(head["epsilon"]), int(head["output"]),
                                    [Decimal(e) for e in epsilons], m, self.words)

    def _send_pending(self, data: dict, entry: dict, server: dict) -> dict:
        pending = entry["pending"]
        last = {"epsilon": pending["epsilons"][-1], "output": pending["outputs"][-1]}
        if not _same_head(server.get("head"), last):  # else the service stored them and the answer was lost
            if not _same_head(server.get("head"), entry.get("head")):
                raise OwnerError(f"value {server['id']}: the service's chain ends at {server.get('head')}, neither "
                                 "at the state file's head nor at its pending points")
            server = self.client.request("POST", f"owner/values/{int(server['id'])}/chain/", json={
                "epsilons": pending["epsilons"], "outputs": pending["outputs"]}).json()
        entry["head"], entry["pending"] = last, None
        self.state.save(data)
        return server


#: The longest string value (the service's ``market.values.inputs.MAX_STRING``).
MAX_STRING = 200


def _check_number(text: str, low, high, attribute, entry: dict | None = None) -> None:
    """Refuse (``OwnerError``) a numeric value that is not a plain decimal number in ``[low, high]``."""
    try:
        x = Decimal(str(text).strip())
        ok = x.is_finite() and Decimal(str(low)) <= x <= Decimal(str(high))
    except InvalidOperation:
        ok = False
    if not ok:
        raise OwnerError(f"{text!r} is not a number between {low} and {high} (attribute {attribute})"
                         + ("" if entry is None else ": the value was made without a chain"))


def _check_text(text: str, attribute) -> None:
    if not isinstance(text, str) or not text or len(text) > MAX_STRING:
        raise OwnerError(f"a value of the string attribute {attribute} is a text of 1 to {MAX_STRING} characters")


def _same_head(server_head: str | None, local: dict | None) -> bool:
    """Whether the service's head (a decimal string or ``None``) is the state file's (``{"epsilon", "output"}``)."""
    if server_head is None or local is None:
        return server_head is None and local is None
    return to_micro(server_head) == to_micro(local["epsilon"])
