"""C2SP trust policies (c2sp.org/tlog-policy): which logs and witnesses to trust, and the quorum of
cosignatures a checkpoint needs (docs/receipts.md#witnesses).

::

    log market.example.org/ledger+1a2b3c4d+AU...  https://market.example.org/log/
    witness assoc owners.example/w1+5e6f7a8b+BA... http://127.0.0.1:7380
    witness audit auditor.example/w+9c0d1e2f+BA...
    group both all assoc audit
    quorum both

``verify_checkpoint`` opens a checkpoint note with the policy: it must carry a verified signature of one of its
logs, and the witnesses whose cosignatures verify must satisfy the quorum.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .checkpoint import Checkpoint, parse_checkpoint
from .note import COSIGNATURE_V1, ED25519, Note, NoteError, Verifier, open_note, parse_vkey

#: The groups, witnesses and logs a policy may define here (the specification recommends at least 32 each).
MAX_NAMES = 256


class PolicyError(NoteError):
    """A malformed policy file (the text says which line)."""


class QuorumNotMet(NoteError):
    """The checkpoint verified, but the witnesses that cosigned it do not satisfy the policy's quorum."""


@dataclass(frozen=True)
class Member:
    name: str
    verifier: Verifier
    url: str = ""


@dataclass(frozen=True)
class Group:
    name: str
    threshold: int
    members: tuple[str, ...]


@dataclass
class Policy:
    logs: list[Member] = field(default_factory=list)
    witnesses: dict[str, Member] = field(default_factory=dict)
    groups: dict[str, Group] = field(default_factory=dict)
    quorum: str = "none"

    def satisfied(self, witnessed: set[str], name: str | None = None) -> bool:
        """Whether the witnesses named in ``witnessed`` satisfy ``name`` (default: the quorum)."""
        name = self.quorum if name is None else name
        if name == "none":
            return True
        if name in self.witnesses:
            return name in witnessed
        group = self.groups[name]
        return sum(self.satisfied(witnessed, m) for m in group.members) >= group.threshold

    def describe_quorum(self, name: str | None = None) -> str:
        """The quorum in words, e.g. ``2 of (assoc, audit)``."""
        name = self.quorum if name is None else name
        if name == "none" or name in self.witnesses:
            return name
        group = self.groups[name]
        return f"{group.threshold} of ({', '.join(self.describe_quorum(m) for m in group.members)})"

    def verify_checkpoint(self, data: bytes, origin: str | None = None) -> tuple[Checkpoint, Note, list[str]]:
        """Open the checkpoint note ``data`` with this policy's log and witness keys: ``(checkpoint, note, names
        of the witnesses whose cosignatures verified)``.  Raises ``NoteError`` (a bad or missing log signature),
        ``QuorumNotMet``, or ``NoteError`` if ``origin`` is given and differs."""
        logs = [m.verifier for m in self.logs]
        witness_keys = [m.verifier for m in self.witnesses.values()]
        note = open_note(data, logs + witness_keys)
        log_signed = [v for v, _, _ in note.verified if v in logs]
        if not log_signed:
            raise NoteError("no signature of a log of the policy verifies")
        checkpoint = parse_checkpoint(note.text)
        if checkpoint.origin not in {v.name for v in log_signed}:
            raise NoteError(f"the checkpoint's origin {checkpoint.origin!r} is not the name of the log key that "
                            "signed it")
        if origin is not None and checkpoint.origin != origin:
            raise NoteError(f"the checkpoint is of {checkpoint.origin!r}, not of {origin!r}")
        by_key = {m.verifier: name for name, m in self.witnesses.items()}
        witnessed = sorted({by_key[v] for v, _, _ in note.verified if v in by_key})
        if not self.satisfied(set(witnessed)):
            raise QuorumNotMet(f"cosigned by {len(witnessed)} of {len(self.witnesses)} witnesses "
                               f"({', '.join(witnessed) or 'none'}); the quorum is {self.describe_quorum()}")
        return checkpoint, note, witnessed


def _threshold(word: str, n: int, lineno: int) -> int:
    if word == "all":
        return n
    if word == "any":
        return 1
    if not word.isascii() or not word.isdigit() or word.startswith("0"):
        raise PolicyError(f"line {lineno}: a group's threshold is 'all', 'any' or a number from 1 to {n}")
    k = int(word)
    if not 1 <= k <= n:
        raise PolicyError(f"line {lineno}: the threshold {k} is not between 1 and {n}")
    return k


def parse_policy(text: str | bytes) -> Policy:
    """A policy file (c2sp.org/tlog-policy).  Log keys must be of type 0x01, witness keys of type 0x04."""
    data = text if isinstance(text, bytes) else text.encode()
    if any(b < 0x20 and b not in (0x09, 0x0A) or b == 0x7F for b in data):
        raise PolicyError("a policy holds no control characters but tab and newline")
    policy, names, keys, quorum_seen = Policy(), set(), set(), False
    for lineno, raw in enumerate(data.decode("utf-8", errors="surrogateescape").split("\n"), start=1):
        words = [w for w in raw.replace("\t", " ").split(" ") if w]  # only space and tab separate: others are opaque
        if not words or words[0].startswith("#"):
            continue
        keyword, args = words[0], words[1:]
        if keyword == "log":
            if len(args) not in (1, 2):
                raise PolicyError(f"line {lineno}: 'log <vkey> [<url>]'")
            verifier = _vkey(args[0], ED25519, lineno)
            if verifier.public in keys:
                raise PolicyError(f"line {lineno}: a duplicate key")
            keys.add(verifier.public)
            policy.logs.append(Member(verifier.name, verifier, args[1] if len(args) > 1 else ""))
        elif keyword == "witness":
            if len(args) not in (2, 3):
                raise PolicyError(f"line {lineno}: 'witness <name> <vkey> [<url>]'")
            name = _new_name(args[0], names, lineno)
            verifier = _vkey(args[1], COSIGNATURE_V1, lineno)
            if verifier.public in keys:
                raise PolicyError(f"line {lineno}: a duplicate key")
            keys.add(verifier.public)
            policy.witnesses[name] = Member(name, verifier, args[2] if len(args) > 2 else "")
        elif keyword == "group":
            if len(args) < 3:
                raise PolicyError(f"line {lineno}: 'group <name> all|any|<k> <name>...'")
            name = _new_name(args[0], names, lineno)
            members = tuple(args[2:])
            for m in members:
                if m not in names or m == name:
                    raise PolicyError(f"line {lineno}: {m!r} is not a witness or group defined above")
            if len(set(members)) != len(members):
                raise PolicyError(f"line {lineno}: a member is listed twice")
            policy.groups[name] = Group(name, _threshold(args[1], len(members), lineno), members)
        elif keyword == "quorum":
            if quorum_seen:
                raise PolicyError(f"line {lineno}: a second quorum line")
            if len(args) != 1 or (args[0] != "none" and args[0] not in names):
                raise PolicyError(f"line {lineno}: 'quorum <name>' names 'none' or a witness or group defined above")
            policy.quorum, quorum_seen = args[0], True
        else:
            raise PolicyError(f"line {lineno}: unknown keyword {keyword!r}")
        if len(names) > MAX_NAMES or len(policy.logs) > MAX_NAMES:
            raise PolicyError(f"more than {MAX_NAMES} names")
    if not quorum_seen:
        raise PolicyError("a policy needs a quorum line ('quorum none' for no witnesses)")
    return policy


def _new_name(name: str, names: set[str], lineno: int) -> str:
    if name == "none" or name in names:
        raise PolicyError(f"line {lineno}: the name {name!r} is reserved or already defined")
    names.add(name)
    return name


def _vkey(text: str, sig_type: int, lineno: int) -> Verifier:
    try:
        verifier = parse_vkey(text)
    except NoteError as exc:
        raise PolicyError(f"line {lineno}: {exc}") from None
    if verifier.sig_type != sig_type:
        raise PolicyError(f"line {lineno}: a {'log' if sig_type == ED25519 else 'witness'} key is of type "
                          f"0x{sig_type:02x}, not 0x{verifier.sig_type:02x}")
    return verifier


def format_policy(policy: Policy) -> str:
    """A policy's text, one line per log, witness and group, then the quorum."""
    lines = [" ".join(filter(None, ("log", m.verifier.vkey, m.url))) for m in policy.logs]
    lines += [" ".join(filter(None, ("witness", n, m.verifier.vkey, m.url))) for n, m in policy.witnesses.items()]
    lines += [f"group {g.name} {g.threshold} {' '.join(g.members)}" for g in policy.groups.values()]
    return "\n".join(lines + [f"quorum {policy.quorum}"]) + "\n"
