"""``ldpmarket-client``: the buyer and owner APIs from a shell (docs/client.md in the repository).

    ldpmarket-client login --username demo-buyer            # asks for the password; stores the token
    ldpmarket-client datasets
    ldpmarket-client quote --attribute 1 --epsilon 0.5
    ldpmarket-client buy --attribute 1 --epsilon 0.5 --out outputs.csv
    ldpmarket-client outputs 7 --out outputs.csv
    ldpmarket-client estimate 7
    ldpmarket-client account
    ldpmarket-client statement

    ldpmarket-client owner contribute --attribute 3 --value green --ceiling 1 --upload-to 2
    ldpmarket-client owner extend                            # e.g. from cron: every held value to its ceiling
    ldpmarket-client owner status
    ldpmarket-client owner receipts --out receipts.json      # the receipts of your values

    ldpmarket-client ledger checkpoint --out checkpoint.json  # the latest signed checkpoint: keep it
    ldpmarket-client ledger public-key --out key.pem
    ldpmarket-client ledger consistency --first 40 --second 42 --out proof.json
    ldpmarket-client verify receipts.json --checkpoint checkpoint.json --public-key key.pem

``verify`` needs nothing from the service (docs/receipts.md#checking-receipts): exit status 0 when everything
verifies, 1 when something does not, 2 for a file it cannot read.  The ``ledger`` verbs need no token.

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
import json
import os
import sys
from pathlib import Path

import platformdirs

from . import __version__
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
    verbs.add_parser("datasets", help="the catalog (JSON)")

    p = verbs.add_parser("quote", help="what a purchase would include and cost now")
    _add_request(p)
    p = verbs.add_parser("buy", help="buy (waits for a large purchase), optionally saving the outputs")
    _add_request(p)
    p.add_argument("--quote", help="buy what this quote token says, paying no more than it")
    p.add_argument("--idempotency-key", help="default: a new uuid4 (give the same one to retry a purchase)")
    p.add_argument("--out", help="write the outputs to this CSV file once completed")
    p.add_argument("--timeout", type=float, help="seconds to wait for a large purchase (default: no limit)")

    p = verbs.add_parser("outputs", help="a purchase's outputs as CSV")
    p.add_argument("purchase", type=int)
    p.add_argument("--out", help="the CSV file (default: standard output)")
    p = verbs.add_parser("estimate", help="a purchase's estimate (JSON)")
    p.add_argument("purchase", type=int)
    p = verbs.add_parser("purchase", help="a purchase's status (JSON)")
    p.add_argument("purchase", type=int)

    verbs.add_parser("account", help="your balance")
    p = verbs.add_parser("statement", help="your account's movements, newest first")
    p.add_argument("--since", help="ISO 8601 date-time")
    p.add_argument("--until", help="ISO 8601 date-time")

    p = verbs.add_parser("owner", help="owner-held values: contribute, extend and see them (docs/custody.md)")
    p.add_argument("--state", help="the owner state file, which holds your raw values (default: "
                                   "$LDPMARKET_OWNER_STATE, or owner-state.json in the user's data directory)")
    owner = p.add_subparsers(dest="owner_verb", required=True, metavar="OWNER_VERB")
    o = owner.add_parser("contribute", help="contribute a value kept on this machine and upload its chain")
    o.add_argument("--attribute", type=int, required=True, help="the attribute's id")
    o.add_argument("--value", required=True, help="your value: one of the attribute's labels (never uploaded)")
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

    p = verbs.add_parser("verify", help="check a receipts file with nothing from the service (docs/receipts.md)")
    p.add_argument("receipts", help="the receipts file (owner receipts --out)")
    p.add_argument("--checkpoint", required=True, help="a checkpoint you kept (ledger checkpoint --out)")
    p.add_argument("--public-key", required=True, help="the service's key, PEM (ledger public-key --out)")
    p.add_argument("--consistency", help="the consistency proof between your checkpoint and the file's, when "
                                         "their tree sizes differ (ledger consistency --out)")
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


def _verify(args) -> int:
    """``verify``: docs/receipts.md#checking-receipts, with no request to the service."""
    try:
        bundle = _read_json(args.receipts, "the receipts file")
        if bundle.get("format") != FORMAT:
            raise Unreadable(f"{args.receipts} is not a receipts file (format {bundle.get('format')!r}, not "
                             f"{FORMAT!r})")
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


def run(args) -> int:
    if args.verb == "verify":
        return _verify(args)
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
        return 1 if failed else 0
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
        _print_json(client.datasets())
    elif args.verb == "quote":
        if args.attribute is None:
            raise SystemExit("ldpmarket-client quote: --attribute is required")
        _print_json(client.quote(args.attribute, args.epsilon, cohort=args.cohort, **_parameters(args)))
    elif args.verb == "buy":
        if args.attribute is None and args.quote is None:
            raise SystemExit("ldpmarket-client buy: give --attribute (with --epsilon) or --quote")
        purchase = client.buy(args.attribute, args.epsilon, quote=args.quote, idempotency_key=args.idempotency_key,
                              timeout=args.timeout, cohort=args.cohort, **_parameters(args))
        if args.out:  # first: the purchase is paid for, so its outputs are saved whatever happens to stdout
            _write_outputs(client, purchase["id"], args.out)
        _print_json(purchase)
    elif args.verb == "outputs":
        _write_outputs(client, args.purchase, args.out)
    elif args.verb == "estimate":
        _print_json(client.estimate(args.purchase))
    elif args.verb == "purchase":
        _print_json(client.purchase(args.purchase))
    elif args.verb == "account":
        _print_json(client.account())
    elif args.verb == "statement":
        _print_json(client.statement(since=args.since, until=args.until))
    return 0


def main(argv: list[str] | None = None) -> int:
    """The console script: returns the exit status (0 done, 1 an error answer or failure, 2 usage)."""
    args = build_parser().parse_args(argv)
    try:
        return run(args)
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
