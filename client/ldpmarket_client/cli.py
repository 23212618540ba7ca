"""``ldpmarket-client``: the buyer and owner APIs from a shell (docs/client.md in the repository).

    ldpmarket-client login --username demo-buyer            # asks for the password; stores the token
    ldpmarket-client datasets
    ldpmarket-client quote --attribute 1 --epsilon 0.5
    ldpmarket-client buy --attribute 1 --epsilon 0.5 --out outputs.csv
    ldpmarket-client outputs 7 --out outputs.csv
    ldpmarket-client estimate 7 --plot estimate-7.png       # the JSON, and the estimate drawn (matplotlib)
    ldpmarket-client account
    ldpmarket-client statement --json                       # JSON for scripts; tables for people without it

    ldpmarket-client owner contribute --attribute 3 --value green --ceiling 1 --upload-to 2
    ldpmarket-client owner extend                            # e.g. from cron: every held value to its ceiling
    ldpmarket-client owner status
    ldpmarket-client owner receipts --out receipts.json      # the receipts of your values

    ldpmarket-client ledger checkpoint --out checkpoint.json  # the latest signed checkpoint: keep it
    ldpmarket-client ledger public-key --out key.pem
    ldpmarket-client ledger consistency --first 40 --second 42 --out proof.json
    ldpmarket-client ledger policy --out policy.txt            # the log's keys, its witnesses, the quorum
    ldpmarket-client verify receipts.json --policy policy.txt --checkpoint checkpoint.json
    ldpmarket-client verify receipts.json --checkpoint checkpoint.json --public-key key.pem   # deprecated
    ldpmarket-client proof export receipts.json --receipt 0 --out block.tlog-proof
    ldpmarket-client proof verify block.tlog-proof --policy policy.txt

    ldpmarket-client witness keygen --name owners.example/w1 --out witness.key   # prints the witness's vkey
    ldpmarket-client witness serve --key witness.key --db witness.sqlite3 --log market.example.org/ledger+...
    ldpmarket-client witness vkey --key witness.key
    ldpmarket-client monitor run --key monitor.key --db monitor.sqlite3 --log market.example.org/ledger+...
    ldpmarket-client monitor serve --key monitor.key --db monitor.sqlite3 --log ... --listen 127.0.0.1:7381

``datasets``, ``quote``, ``buy``, ``purchase``, ``account`` and ``statement`` print tables (``tables.py``), or the
API's JSON unchanged with ``--json``.  Output piped into a reader that stops early (``| head``) ends quietly.

``verify`` needs nothing from the service (docs/receipts.md#checking-receipts): exit status 0 when everything
verifies, 1 when something does not, 2 for a file it cannot read.  The ``ledger`` verbs need no token.
The ``witness`` verbs run a C2SP witness of the ledger (docs/client.md#running-a-witness) and need no service.

The owner verbs keep an owner-held value on this machine (docs/custody.md): the raw value and the chain's head
stay in the owner state file (``--state``, else ``LDPMARKET_OWNER_STATE``, else ``owner-state.json`` in the
user's data directory, readable by the user only); only epsilons and outputs drawn here are uploaded.

The service's address: ``--url``, else ``LDPMARKET_URL``, else the one ``login`` stored, else
http://127.0.0.1:8000.  The token: ``--token``, else ``LDPMARKET_TOKEN``, else the one ``login`` stored in
the config file (``--config``, else ``LDPMARKET_CONFIG``, else ``config.json`` in the user's config directory,
readable by the user only).
"""
from __future__ import annotations

import argparse
import getpass
import hashlib
import json
import os
import sys
from pathlib import Path

import platformdirs

from . import __version__, tables
from .client import DEFAULT_URL, Client
from .errors import ClientError, ProblemError
from .owner import Owner, default_state_path
from .receipts import FORMAT, load_public_key, verify_bundle

#: The one-shot mechanisms' parameters that quote and buy pass through.
PARAMETERS = ("theta", "family", "eps1", "eps2", "mechanism", "pi_b", "p2")


def config_path(explicit: str | None = None) -> Path:
    value = explicit or os.environ.get("LDPMARKET_CONFIG")
    if value:
        return Path(value).expanduser()
    return Path(platformdirs.user_config_dir("ldpmarket-client", appauthor=False)) / "config.json"


def load_config(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise SystemExit(f"ldpmarket-client: cannot read {path}: {exc}") from None


def save_config(path: Path, config: dict) -> None:
    """Write the config (it holds a token) readable and writable by the user only (0600)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # also when the file existed with other permissions
    with os.fdopen(fd, "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def _print_json(data) -> None:
    json.dump(data, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


def _parameters(args) -> dict:
    return {name: getattr(args, name) for name in PARAMETERS if getattr(args, name, None) is not None}


def _add_request(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--attribute", type=int, help="the attribute's id (see `datasets`)")
    parser.add_argument("--epsilon", help="the epsilon, e.g. 0.5")
    parser.add_argument("--cohort", type=int, help="string attributes: the RAPPOR cohort")
    for name in PARAMETERS:
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, help=argparse.SUPPRESS)


def _add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print the API's JSON (for scripts) instead of a table for people")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ldpmarket-client",
                                     description="The ldpmarket buyer and owner APIs from a shell.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--url", help=f"the service (default: $LDPMARKET_URL, the stored one, {DEFAULT_URL})")
    parser.add_argument("--token", help="an API token (default: $LDPMARKET_TOKEN, then the one login stored)")
    parser.add_argument("--config", help="the config file (default: $LDPMARKET_CONFIG, or config.json in the "
                                         "user's config directory)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar while a purchase runs")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    p = verbs.add_parser("login", help="sign in and store the token in the config file")
    p.add_argument("--username", help="asked for if not given")
    p.add_argument("--password-stdin", action="store_true",
                   help="read the password from standard input (default: $LDPMARKET_PASSWORD, or asked for)")
    verbs.add_parser("logout", help="revoke the stored token and forget it")
    p = verbs.add_parser("datasets", help="the catalog: one row per attribute")
    _add_json(p)

    p = verbs.add_parser("quote", help="what a purchase would include and cost now")
    _add_request(p)
    _add_json(p)
    p = verbs.add_parser("buy", help="buy (waits for a large purchase), optionally saving the outputs")
    _add_request(p)
    _add_json(p)
    p.add_argument("--quote", help="buy what this quote token says, paying no more than it")
    p.add_argument("--idempotency-key", help="default: a new uuid4 (give the same one to retry a purchase)")
    p.add_argument("--out", help="write the outputs to this CSV file once completed")
    p.add_argument("--timeout", type=float, help="seconds to wait for a large purchase (default: no limit)")

    p = verbs.add_parser("outputs", help="a purchase's outputs as CSV")
    p.add_argument("purchase", type=int)
    p.add_argument("--out", help="the CSV file (default: standard output)")
    p = verbs.add_parser("estimate", help="a purchase's estimate (JSON)")
    p.add_argument("purchase", type=int)
    p.add_argument("--plot", metavar="PNG", help="also draw the estimate with its 95%% confidence intervals to "
                                                 "this PNG file (needs matplotlib: ldpmarket-client[plot])")
    p.add_argument("--method", choices=["unbiased", "norm_sub", "ibu"], default="unbiased",
                   help="unbiased (the default, with 95%% intervals), or consistent frequencies: norm_sub or ibu "
                        "(docs/mechanisms-reference.md#consistent-estimates)")
    p = verbs.add_parser("purchase", help="a purchase's status and progress")
    p.add_argument("purchase", type=int)
    _add_json(p)

    p = verbs.add_parser("account", help="your balance")
    _add_json(p)
    p = verbs.add_parser("statement", help="your account's movements, newest first")
    _add_json(p)
    p.add_argument("--since", help="ISO 8601 date-time")
    p.add_argument("--until", help="ISO 8601 date-time")

    p = verbs.add_parser("owner", help="owner-held values: contribute, extend and see them (docs/custody.md)")
    p.add_argument("--state", help="the owner state file, which holds your raw values (default: "
                                   "$LDPMARKET_OWNER_STATE, or owner-state.json in the user's data directory)")
    owner = p.add_subparsers(dest="owner_verb", required=True, metavar="OWNER_VERB")
    o = owner.add_parser("contribute", help="contribute a value kept on this machine and upload its chain")
    o.add_argument("--attribute", type=int, required=True, help="the attribute's id")
    o.add_argument("--value", required=True, help="your value: one of the attribute's labels, a number in its bounds "
                                                   "(numeric) or a text (string); never uploaded")
    o.add_argument("--ceiling", required=True, help="the most epsilon sales of this value may spend, e.g. 1")
    o.add_argument("--upload-to", help="draw and upload the chain up to this epsilon (default: the ceiling's "
                                       "last grid point; above the ceiling is allowed and never sold)")
    o = owner.add_parser("extend", help="continue the chains of the values held here (default: all of them)")
    o.add_argument("--value-id", type=int, help="only this value")
    o.add_argument("--upload-to", help="up to this epsilon (default: each value's ceiling's last grid point)")
    owner.add_parser("status", help="your values as the service sees them, with what the state file holds")
    o = owner.add_parser("receipts", help="the receipts of your values' ledger entries, every page merged into "
                                          "one file (docs/receipts.md)")
    o.add_argument("--out", help="the receipts file (default: standard output)")
    o.add_argument("--value", type=int, help="only this value's")
    o.add_argument("--tree-size", type=int, help="against the checkpoint of this tree size (default: the latest)")

    p = verbs.add_parser("ledger", help="the ledger's signed checkpoints and their key (no token needed)")
    ledger = p.add_subparsers(dest="ledger_verb", required=True, metavar="LEDGER_VERB")
    o = ledger.add_parser("checkpoint", help="the latest signed checkpoint (keep it to check receipts later)")
    o.add_argument("--out", help="the JSON file (default: standard output)")
    o = ledger.add_parser("public-key", help="the key that signs the checkpoints, as PEM")
    o.add_argument("--out", help="the PEM file (default: standard output)")
    o = ledger.add_parser("consistency", help="the proof that the log of tree size FIRST is a prefix of SECOND's")
    o.add_argument("--first", type=int, required=True, help="the smaller tree size")
    o.add_argument("--second", type=int, required=True, help="the larger tree size")
    o.add_argument("--out", help="the JSON file (default: standard output)")
    o = ledger.add_parser("policy", help="the trust policy the service publishes: its keys, witnesses, quorum "
                                         "(c2sp.org/tlog-policy; docs/receipts.md#witnesses)")
    o.add_argument("--out", help="the policy file (default: standard output)")

    p = verbs.add_parser("verify", help="check a receipts file with nothing from the service (docs/receipts.md)")
    p.add_argument("receipts", help="the receipts file (owner receipts --out)")
    p.add_argument("--policy", help="a trust policy (ledger policy --out, or your own): the checkpoint must be "
                                    "signed by one of its logs and cosigned by its quorum of witnesses")
    p.add_argument("--checkpoint", help="a checkpoint you kept (ledger checkpoint --out); with --policy, "
                                        "default: the receipts file's own")
    p.add_argument("--public-key", help="deprecated beside --policy: the service's key, PEM (ledger public-key "
                                        "--out)")
    p.add_argument("--consistency", help="the consistency proof between your checkpoint and the file's, when "
                                         "their tree sizes differ (ledger consistency --out)")

    p = verbs.add_parser("proof", help="a receipt's block in the log as a C2SP tlog proof (docs/receipts.md"
                                       "#exporting-a-proof)")
    proof = p.add_subparsers(dest="proof_verb", required=True, metavar="PROOF_VERB")
    o = proof.add_parser("export", help="write receipt N's block leaf, its inclusion proof and the cosigned "
                                        "checkpoint as a .tlog-proof file")
    o.add_argument("receipts", help="the receipts file (owner receipts --out)")
    o.add_argument("--receipt", type=int, default=0, help="the receipt's index in the file (default 0)")
    o.add_argument("--out", help="the proof file (default: standard output)")
    o = proof.add_parser("verify", help="check a .tlog-proof file against a policy")
    o.add_argument("proof", help="the .tlog-proof file")
    o.add_argument("--policy", required=True, help="the trust policy (ledger policy --out)")

    p = verbs.add_parser("witness", help="run a C2SP witness that cosigns the ledger's checkpoints "
                                         "(docs/client.md#running-a-witness)")
    witness = p.add_subparsers(dest="witness_verb", required=True, metavar="WITNESS_VERB")
    o = witness.add_parser("keygen", help="a new witness key (type 0x04 Ed25519 cosigner); prints its vkey")
    o.add_argument("--name", required=True, help="the witness's key name, a schema-less URL, e.g. owners.example/w1")
    o.add_argument("--out", help="the key file, created with mode 0600 (default: the key on standard output)")
    o = witness.add_parser("vkey", help="the verifier key (vkey) of a witness key file")
    o.add_argument("--key", required=True, help="the witness key file (witness keygen --out)")
    o = witness.add_parser("serve", help="answer add-checkpoint and the monitoring GET (c2sp.org/tlog-witness)")
    o.add_argument("--key", required=True, help="the witness key file (witness keygen --out)")
    o.add_argument("--db", required=True, help="the SQLite file of the latest cosigned checkpoints (created)")
    o.add_argument("--log", action="append", required=True, metavar="VKEY",
                   help="a trusted log key (type 0x01 vkey); its name is the log's origin (repeatable)")
    o.add_argument("--listen", default="127.0.0.1:7380", help="host:port (default: 127.0.0.1:7380)")
    o.add_argument("--prefix", default="", help="the URL prefix of both APIs (default: none)")
    o = witness.add_parser("refused", help="the log-signed checkpoints refused as possible forks (JSON)")
    o.add_argument("--db", required=True, help="the witness's SQLite file")
    o.add_argument("--origin", help="only this log's")
    p = verbs.add_parser("monitor", help="check what the ledger says and cosign it (an auditor's token; "
                                         "docs/receipts.md#the-monitor)")
    monitor = p.add_subparsers(dest="monitor_verb", required=True, metavar="MONITOR_VERB")
    for name, what in (("run", "follow the log: check each new checkpoint, write the cosigned one"),
                       ("serve", "be a witness of the log's policy that cosigns only what passes the checks")):
        o = monitor.add_parser(name, help=what)
        o.add_argument("--key", required=True, help="the monitor's key file (`witness keygen`; name it for what it "
                                                    "checks, e.g. auditor.example/ldpmarket-budget-rules)")
        o.add_argument("--db", required=True, help="the monitor's SQLite state (created)")
        o.add_argument("--log", action="append", required=True, metavar="VKEY",
                       help="the log's key (type 0x01 vkey, GET /api/v1/ledger/public-key/); repeatable")
        if name == "run":
            o.add_argument("--once", action="store_true", help="check the latest checkpoint and stop")
            o.add_argument("--interval", type=float, default=60.0, help="seconds between checks (default 60)")
            o.add_argument("--out", help="write each cosigned checkpoint to this file")
        else:
            o.add_argument("--listen", default="127.0.0.1:7381", help="host:port (default: 127.0.0.1:7381)")
            o.add_argument("--witness-db", help="the witness part's SQLite file (default: <db>.witness)")
    return parser


def _write_outputs(client: Client, purchase_id: int, out: str | None) -> None:
    if out is None or out == "-":
        client.outputs_csv(purchase_id, sys.stdout.buffer)
        sys.stdout.buffer.flush()
        return
    with open(out, "wb") as f:
        client.outputs_csv(purchase_id, f)
    print(f"wrote the outputs of purchase {purchase_id} to {out}", file=sys.stderr)


def _write_json(data, out: str | None, what: str) -> None:
    if out is None or out == "-":
        _print_json(data)
        return
    with open(out, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {what} to {out}", file=sys.stderr)


class Unreadable(Exception):
    """An input file of ``verify`` that cannot be read: exit status 2."""


def _read_json(path: str, what: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise Unreadable(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise Unreadable(f"{what} {path} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise Unreadable(f"{what} {path} is not a JSON object but a {type(data).__name__}")
    return data


def _read_text(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise Unreadable(f"cannot read {what} {path}: {exc.strerror or exc}") from None


def _policy_checks(policy, bundle: dict, kept: dict | None) -> tuple[list[str], list[str], object]:
    """``verify --policy`` (docs/receipts.md#witnesses): the receipts file's checkpoint note (and the kept
    checkpoint's, when it has one) opened with the policy; ``(lines, problems, statement key)``, the key being the
    policy's log key that signed the file's statement."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from .tlog.note import NoteError

    lines, problems, key = [], [], None
    for what, cp in (("the receipts file's checkpoint", bundle.get("checkpoint")), ("your checkpoint", kept)):
        if not isinstance(cp, dict):
            continue
        note = cp.get("note")
        if not isinstance(note, str):
            if what == "your checkpoint":
                continue  # an older checkpoint file: its statement signature is checked below
            problems.append(f"{what} has no signed note (made before signed notes): check it with --public-key")
            continue
        try:
            checkpoint, _, witnessed = policy.verify_checkpoint(note.encode())
        except NoteError as exc:
            problems.append(f"{what}: {exc}")
            continue
        if (checkpoint.size, checkpoint.root.hex()) != (cp.get("tree_size"), cp.get("root_hash")):
            problems.append(f"{what}: its signed note states tree size {checkpoint.size} and another root than "
                            f"its tree_size {cp.get('tree_size')} and root_hash")
            continue
        lines.append(f"PASS  policy: {what} (tree size {checkpoint.size}) is signed by {checkpoint.origin} and "
                     f"witnessed by {len(witnessed)} of {len(policy.witnesses)}"
                     f"{' (' + ', '.join(witnessed) + ')' if witnessed else ''}; quorum {policy.describe_quorum()}")
    key_id = (bundle.get("checkpoint") or {}).get("key_id")
    for member in policy.logs:
        if hashlib.sha256(member.verifier.public).hexdigest() == key_id:
            key = Ed25519PublicKey.from_public_bytes(member.verifier.public)
    if key is None and not problems:
        problems.append("no log key of the policy signed the receipts file's checkpoint statement")
    return lines, problems, key


def _verify(args) -> int:
    """``verify``: docs/receipts.md#checking-receipts, with no request to the service."""
    from .tlog.note import NoteError
    from .tlog.policy import parse_policy

    try:
        bundle = _read_json(args.receipts, "the receipts file")
        if bundle.get("format") != FORMAT:
            raise Unreadable(f"{args.receipts} is not a receipts file (format {bundle.get('format')!r}, not "
                             f"{FORMAT!r})")
        if not args.policy and not (args.checkpoint and args.public_key):
            raise Unreadable("give --policy (and optionally --checkpoint), or --checkpoint and --public-key")
        if args.policy:
            try:
                policy = parse_policy(_read_text(args.policy, "the policy"))
            except NoteError as exc:
                raise Unreadable(f"the policy {args.policy}: {exc}") from None
            kept = _read_json(args.checkpoint, "the checkpoint") if args.checkpoint else None
            lines, problems, policy_key = _policy_checks(policy, bundle, kept)
            for line in lines:
                print(line)
            if problems:
                for problem in problems:
                    print(f"FAIL  policy: {problem}")
                print("RESULT: FAIL -- the checkpoint does not satisfy the policy")
                return 1
            if not args.public_key:
                checkpoint = kept if kept is not None else bundle["checkpoint"]
                consistency = _read_json(args.consistency, "the consistency proof") if args.consistency else None
                report = verify_bundle(bundle, checkpoint, policy_key, consistency)
                for line in report.lines():
                    print(line)
                return 0 if report.ok else 1
        checkpoint = _read_json(args.checkpoint, "the checkpoint")
        if checkpoint.get("format") == FORMAT:  # an older receipts file: its checkpoint
            checkpoint = checkpoint.get("checkpoint")
        elif isinstance(checkpoint.get("results"), list):
            raise Unreadable(f"{args.checkpoint} is a page of checkpoints, not one: save one with "
                             f"`ldpmarket-client ledger checkpoint --out checkpoint.json`")
        consistency = _read_json(args.consistency, "the consistency proof") if args.consistency else None
        try:
            with open(args.public_key, "rb") as f:
                key = load_public_key(f.read())
        except OSError as exc:
            raise Unreadable(f"cannot read the public key {args.public_key}: {exc.strerror or exc}") from None
        except (ValueError, TypeError) as exc:
            raise Unreadable(f"the public key {args.public_key} is {exc}") from None
    except Unreadable as exc:
        print(f"ldpmarket-client verify: {exc}", file=sys.stderr)
        return 2
    report = verify_bundle(bundle, checkpoint, key, consistency)
    for line in report.lines():
        print(line)
    return 0 if report.ok else 1


def _ledger(args, url: str, progress: bool) -> int:
    """The public ledger verbs: no token (accounts/ledger/api.py answers anyone)."""
    with Client(url, progress=progress) as client:
        if args.ledger_verb == "checkpoint":
            results = client.request("GET", "ledger/checkpoints/").json().get("results") or []
            if not results:
                raise ClientError(f"{client.url} has signed no checkpoint yet")
            _write_json(results[0], args.out, f"the checkpoint of tree size {results[0].get('tree_size')}")
        elif args.ledger_verb == "public-key":
            pem = client.request("GET", "ledger/public-key/").json()["public_key_pem"]
            if args.out is None or args.out == "-":
                sys.stdout.write(pem if pem.endswith("\n") else pem + "\n")
            else:
                with open(args.out, "w", encoding="ascii") as f:
                    f.write(pem)
                print(f"wrote the ledger's public key to {args.out}", file=sys.stderr)
        elif args.ledger_verb == "consistency":
            proof = client.request("GET", "ledger/consistency/",
                                   params={"first": args.first, "second": args.second}).json()
            _write_json(proof, args.out, f"the consistency proof from tree size {args.first} to {args.second}")
        elif args.ledger_verb == "policy":
            text = client.request("GET", "ledger/policy/").text
            if args.out is None or args.out == "-":
                sys.stdout.write(text)
            else:
                Path(args.out).write_text(text, encoding="utf-8")
                print(f"wrote the ledger's trust policy to {args.out}", file=sys.stderr)
    return 0


def _proof(args) -> int:
    """``proof export`` and ``proof verify`` (docs/receipts.md#exporting-a-proof)."""
    from .tlog.note import NoteError
    from .tlog.policy import parse_policy
    from .tlog.proof import Proof, format_proof, verify_proof

    try:
        if args.proof_verb == "export":
            bundle = _read_json(args.receipts, "the receipts file")
            receipts = bundle.get("receipts") or []
            if not 0 <= args.receipt < len(receipts):
                raise Unreadable(f"the file holds {len(receipts)} receipts: no receipt {args.receipt}")
            receipt, note = receipts[args.receipt], (bundle.get("checkpoint") or {}).get("note")
            if not isinstance(note, str):
                raise Unreadable("the receipts file's checkpoint has no signed note (made before signed notes)")
            proof = Proof(int(receipt["block_index"]), tuple(bytes.fromhex(h) for h in receipt["block_proof"]),
                          note.encode(), bytes.fromhex(receipt["block_data"]))
            data = format_proof(proof)
            if args.out is None or args.out == "-":
                sys.stdout.write(data.decode())
            else:
                Path(args.out).write_bytes(data)
                print(f"wrote the proof of receipt {args.receipt}'s block (leaf {proof.index}) to {args.out}",
                      file=sys.stderr)
            return 0
        policy = parse_policy(_read_text(args.policy, "the policy"))
        checkpoint, witnessed = verify_proof(_read_text(args.proof, "the proof"), policy)
    except Unreadable as exc:
        print(f"ldpmarket-client proof: {exc}", file=sys.stderr)
        return 2
    except (NoteError, KeyError, TypeError, ValueError) as exc:
        print(f"FAIL  {exc}")
        return 1
    print(f"PASS  the entry is in the log of {checkpoint.origin} at tree size {checkpoint.size}, witnessed by "
          f"{len(witnessed)} of {len(policy.witnesses)}{' (' + ', '.join(witnessed) + ')' if witnessed else ''}")
    return 0


def _receipts(args, client: Client) -> int:
    """``owner receipts``: every page of ``GET owner/receipts/`` merged into one receipts file."""
    params = {k: v for k, v in (("value", args.value), ("tree_size", args.tree_size)) if v is not None}
    page = client.request("GET", "owner/receipts/", params=params).json()
    bundle = {"format": page.get("format"), "checkpoint": page.get("checkpoint"), "receipts": [], "pending": [],
              "next": None}
    while True:
        if page.get("checkpoint") != bundle["checkpoint"]:
            size = (bundle["checkpoint"] or {}).get("tree_size")
            raise ClientError(f"the pages of receipts are against different checkpoints (a new one was signed "
                              f"meanwhile): run again with --tree-size {size}")
        bundle["receipts"] += page.get("receipts") or []
        bundle["pending"] += page.get("pending") or []
        if not page.get("next"):
            break
        page = client.request("GET", page["next"]).json()
    n = len(bundle["receipts"])
    _write_json(bundle, args.out, f"{n} receipt{'s' * (n != 1)} against the checkpoint of tree size "
                                  f"{(bundle['checkpoint'] or {}).get('tree_size')}")
    return 0


def _witness(args) -> int:
    """The ``witness`` verbs (docs/client.md#running-a-witness): keys, the server, the refused checkpoints."""
    import signal
    import sqlite3
    from contextlib import closing

    from . import witness as w
    from .tlog.note import COSIGNATURE_V1, NoteError, Signer, parse_vkey

    try:
        if args.witness_verb == "keygen":
            signer = Signer.generate(args.name, COSIGNATURE_V1)
            if args.out is None or args.out == "-":
                print(signer.skey)
                print(f"vkey: {signer.verifier.vkey}", file=sys.stderr)
                return 0
            fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never overwrite a key
            with os.fdopen(fd, "w", encoding="ascii") as f:
                f.write(signer.skey + "\n")
            print(f"wrote the witness key {args.name} to {args.out}", file=sys.stderr)
            print(signer.verifier.vkey)
        elif args.witness_verb == "vkey":
            print(w.load_signer(args.key).verifier.vkey)
        elif args.witness_verb == "serve":
            witness = w.Witness(w.load_signer(args.key), [parse_vkey(v) for v in args.log], args.db, log=w.stderr_log)
            signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop as on Ctrl-C
            w.serve(witness, args.listen, args.prefix)
        elif args.witness_verb == "refused":
            uri = Path(args.db).resolve().as_uri() + "?mode=ro"  # read only; never creates a file
            with closing(sqlite3.connect(uri, uri=True)) as conn:
                _print_json(w.refusals(conn, args.origin))
    except (NoteError, ValueError, sqlite3.Error) as exc:
        print(f"ldpmarket-client witness: {exc}", file=sys.stderr)
        return 2
    return 0


def _monitor(args, url: str, token: str) -> int:
    """The ``monitor`` verbs (docs/receipts.md#the-monitor): 0 while every check passes, 1 at a violation."""
    import signal
    import time

    from . import witness as w
    from .monitor import Monitor
    from .tlog.note import NoteError, parse_vkey

    try:
        signer = w.load_signer(args.key)
        monitor = Monitor(url, token, [parse_vkey(v) for v in args.log], signer, args.db)
    except (NoteError, ValueError, OSError) as exc:
        print(f"ldpmarket-client monitor: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if args.monitor_verb == "serve":
        witness = w.Witness(signer, monitor.logs, args.witness_db or f"{args.db}.witness", log=w.stderr_log,
                            vet=monitor.vet)
        w.serve(witness, args.listen)
        return 0
    try:
        while True:
            outcome = monitor.follow()
            if outcome.unavailable:
                print(f"unavailable, trying again later: {outcome.unavailable}", file=sys.stderr)
                if args.once:
                    return 2
                time.sleep(args.interval)
                continue
            if outcome.violation:
                print(f"VIOLATION at tree size {outcome.size}: {outcome.violation}", file=sys.stderr)
                return 1
            print(f"cosigned tree size {outcome.size}: {outcome.blocks} new blocks, {outcome.checked} entries "
                  f"replayed", file=sys.stderr)
            if args.out:
                Path(args.out).write_bytes(outcome.cosigned)
            if args.once:
                return 0
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0
    except (NoteError, OSError) as exc:
        print(f"ldpmarket-client monitor: {exc}", file=sys.stderr)
        return 2


def run(args) -> int:
    if args.verb == "verify":
        return _verify(args)
    if args.verb == "witness":
        return _witness(args)
    if args.verb == "proof":
        return _proof(args)
    path = config_path(args.config)
    config = load_config(path)
    url = args.url or os.environ.get("LDPMARKET_URL") or config.get("url") or DEFAULT_URL
    progress = not args.no_progress
    if args.verb == "ledger":
        return _ledger(args, url, progress)

    if args.verb == "login":
        username = args.username or input("username: ")
        if args.password_stdin:
            password = sys.stdin.readline().rstrip("\n")
        else:
            password = os.environ.get("LDPMARKET_PASSWORD") or getpass.getpass("password: ")
        with Client(url, progress=progress) as client:
            client.login(username, password)
        save_config(path, {"url": client.url, "username": username, "token": client.token,
                           "expiry": client.token_expiry})
        print(f"signed in to {client.url} as {username}; token stored in {path} (expires {client.token_expiry})",
              file=sys.stderr)
        return 0

    token = args.token or os.environ.get("LDPMARKET_TOKEN") or config.get("token")
    if not token:
        print("ldpmarket-client: not signed in: run `ldpmarket-client login`, or set LDPMARKET_TOKEN",
              file=sys.stderr)
        return 2
    if args.verb == "monitor":
        return _monitor(args, url, token)
    with Client(url, token, progress=progress) as client:
        if args.verb == "owner":
            return _owner(args, client)
        return _verb(args, client, path, config, token)


def _owner(args, client: Client) -> int:
    if args.owner_verb == "receipts":
        return _receipts(args, client)
    owner = Owner(client=client, state=args.state or default_state_path())
    if args.owner_verb == "contribute":
        _print_json(owner.contribute(args.attribute, args.value, ceiling=args.ceiling, upload_to=args.upload_to))
    elif args.owner_verb == "extend":
        results = owner.extend(args.value_id, upload_to=args.upload_to)
        _print_json(results)
        failed = [r for r in results if "error" in r]
        for r in failed:
            print(f"ldpmarket-client: value {r['id']}: {r['error']}", file=sys.stderr)
        if args.value_id is not None:
            return 1 if failed else 0
        # Every value held here was tried; say which of yours are not (they were not asked for, unless none is
        # held here at all: then nothing the owner meant to extend was).
        elsewhere = owner.held_elsewhere()
        for v in elsewhere:
            print(f"ldpmarket-client: value {v['id']} ({v.get('attribute_name') or v['attribute']}) not extended: "
                  f"{v['reason']}", file=sys.stderr)
        if not results:
            print(f"ldpmarket-client: the state file {owner.state.path} holds no value: nothing extended",
                  file=sys.stderr)
        return 1 if failed or (elsewhere and not results) else 0
    elif args.owner_verb == "status":
        _print_json(owner.status())
    return 0


def _verb(args, client: Client, path: Path, config: dict, token: str) -> int:
    if args.verb == "logout":
        client.logout()
        if config.get("token") == token:
            config.pop("token", None)
            config.pop("expiry", None)
            save_config(path, config)
        print("signed out: the token is revoked", file=sys.stderr)
    elif args.verb == "datasets":
        catalog = client.datasets()
        _show(args, catalog, lambda: tables.datasets_table(catalog, _currency(client)))
    elif args.verb == "quote":
        if args.attribute is None:
            raise SystemExit("ldpmarket-client quote: --attribute is required")
        quote = client.quote(args.attribute, args.epsilon, cohort=args.cohort, **_parameters(args))
        _show(args, quote, lambda: tables.quote_fields(quote, _currency(client, quote)))
    elif args.verb == "buy":
        if args.attribute is None and args.quote is None:
            raise SystemExit("ldpmarket-client buy: give --attribute (with --epsilon) or --quote")
        purchase = client.buy(args.attribute, args.epsilon, quote=args.quote, idempotency_key=args.idempotency_key,
                              timeout=args.timeout, cohort=args.cohort, **_parameters(args))
        if args.out:  # first: the purchase is paid for, so its outputs are saved whatever happens to stdout
            _write_outputs(client, purchase["id"], args.out)
        _show(args, purchase, lambda: tables.purchase_fields(purchase, _currency(client, purchase)))
    elif args.verb == "outputs":
        _write_outputs(client, args.purchase, args.out)
    elif args.verb == "estimate":
        plot = None
        if args.plot:
            try:
                from . import plot
            except ImportError:
                print("ldpmarket-client estimate: --plot needs matplotlib: pip install 'ldpmarket-client[plot]'",
                      file=sys.stderr)
                return 2
        estimate = client.estimate(args.purchase, method=args.method)
        if plot is not None:
            try:
                plot.plot_estimate(estimate, args.plot)
            except plot.NothingToPlot as exc:
                print(f"ldpmarket-client estimate: {exc}", file=sys.stderr)
                return 1
            print(f"wrote the plot of purchase {args.purchase}'s estimate to {args.plot}", file=sys.stderr)
        _print_json(estimate)
    elif args.verb == "purchase":
        purchase = client.purchase(args.purchase)
        _show(args, purchase, lambda: tables.purchase_fields(purchase, _currency(client, purchase)))
    elif args.verb == "account":
        account = client.account()
        _show(args, account, lambda: tables.account_fields(account))
    elif args.verb == "statement":
        entries = client.statement(since=args.since, until=args.until)
        _show(args, entries, lambda: tables.statement_table(
            entries, None if all(e.get("currency") for e in entries) else _currency(client)))
    return 0


def _show(args, data, table) -> None:
    """``data`` as JSON with ``--json`` (the API's, unchanged: for scripts), else ``table()`` for people."""
    if args.json:
        _print_json(data)
    else:
        sys.stdout.write(table() + "\n")


def _currency(client: Client, data: dict | None = None) -> str | None:
    """The currency of the amounts in ``data``: its own ``currency``, else the market's single currency, which
    the account shows (docs/money.md); ``None`` when the account cannot be read."""
    if data and data.get("currency"):
        return data["currency"]
    try:
        return client.account().get("currency")
    except ProblemError:
        return None


def main(argv: list[str] | None = None) -> int:
    """The console script: returns the exit status (0 done, 1 an error answer or failure, 2 usage)."""
    try:
        args = build_parser().parse_args(argv)
        code = run(args)
        sys.stdout.flush()  # here, so that a closed pipe is noticed here and not at exit
        return code
    except BrokenPipeError:
        # The reader went away (`... | head`): end quietly.  Python flushes stdout again at exit, so point it at
        # /dev/null first (docs.python.org/3/library/signal.html, "Note on SIGPIPE").
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # a stdout without a file descriptor (an embedding program's)
            pass
        return 1
    except ProblemError as exc:
        print(f"ldpmarket-client: {exc}", file=sys.stderr)
        return 1
    except ClientError as exc:
        print(f"ldpmarket-client: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # connection refused, unwritable --out, ...
        print(f"ldpmarket-client: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
