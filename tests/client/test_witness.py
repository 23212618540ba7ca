"""The witness (client/ldpmarket_client/witness.py; docs/client.md#running-a-witness) against c2sp.org/tlog-witness:
every status of add-checkpoint, the compare-and-swap of the latest cosigned size, persistence, the monitoring GET,
the HTTP rules, and the real ``ldpmarket-client witness serve`` process fed by a log built here.

The logs' trees and consistency proofs come from the service's ``accounts/ledger/merkle.py`` (RFC 6962
PROOF(m, D[n])), not from the client's ``tlog.merkle`` that the witness verifies with.
"""
from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import re
import socket
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from accounts.ledger import merkle as service_merkle
from ldpmarket_client import witness as w
from ldpmarket_client.tlog.checkpoint import format_checkpoint
from ldpmarket_client.tlog.note import COSIGNATURE_V1, ED25519, Signer, open_note, parse_vkey, sign_note

EMPTY_ROOT = hashlib.sha256(b"").digest()


class Log:
    """A log built in the test: leaves ``b"<tag> entry <i>"``, checkpoints signed with a type 0x01 key named as
    the origin."""

    def __init__(self, origin: str = "market.example.org/ledger", tag: str = "main", signer: Signer | None = None):
        self.origin = origin
        self.tag = tag
        self.signer = signer or Signer.generate(origin, ED25519)

    def leaves(self, size: int) -> list[bytes]:
        return [service_merkle.leaf_hash(f"{self.tag} entry {i}".encode()) for i in range(size)]

    def root(self, size: int) -> bytes:
        return service_merkle.root(self.leaves(size))

    def proof(self, old: int, size: int) -> list[bytes]:
        if old in (0, size):
            return []
        return service_merkle.consistency_proof(old, self.leaves(size))

    def note(self, size: int, root: bytes | None = None, signers: list[Signer] | None = None) -> bytes:
        text = format_checkpoint(self.origin, size, self.root(size) if root is None else root)
        return sign_note(text, signers or [self.signer])

    def body(self, old: int, size: int, *, proof: list[bytes] | None = None, note: bytes | None = None) -> bytes:
        proof = self.proof(old, size) if proof is None else proof
        lines = "".join(base64.b64encode(h).decode() + "\n" for h in proof)
        return f"old {old}\n{lines}\n".encode() + (self.note(size) if note is None else note)


def make_body(old: int, proof: list[bytes], note: bytes) -> bytes:
    return f"old {old}\n".encode() + b"".join(base64.b64encode(h) + b"\n" for h in proof) + b"\n" + note


class Clock:
    def __init__(self, now: int = 1_700_000_000):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def log():
    return Log()


@pytest.fixture
def witness_key():
    return Signer.generate("owners.example/w1", COSIGNATURE_V1)


@pytest.fixture
def make_witness(tmp_path, witness_key, log):
    def make(*logs: Log, cls=w.Witness, clock=None, lines=None, db=None):
        logs = logs or (log,)
        return cls(witness_key, [lg.signer.verifier for lg in logs], db or tmp_path / "witness.sqlite3",
                   clock=clock or Clock(), log=(lines.append if lines is not None else None))
    return make


def status_of(witness: w.Witness, body: bytes) -> int:
    with pytest.raises(w.WitnessError) as info:
        witness.add_checkpoint(body)
    return info.value.status


def assert_cosigned(answer: bytes, note: bytes, witness_key: Signer, timestamp: int | None = None) -> int:
    """The answer is one cosignature line that verifies over ``note`` with the witness's vkey; its timestamp."""
    assert answer.startswith("\u2014 owners.example/w1 ".encode()) and answer.endswith(b"\n")
    assert answer.count(b"\n") == 1
    verifier = parse_vkey(witness_key.verifier.vkey)
    opened = open_note(note + answer, [verifier])
    [(v, ts, _)] = opened.verified
    assert v == verifier and ts > 0
    if timestamp is not None:
        assert ts == timestamp
    return ts


# --- add-checkpoint, 200 ---------------------------------------------------------------------------------------

def test_a_growing_log_is_cosigned_and_the_latest_checkpoint_served(make_witness, log, witness_key):
    clock = Clock()
    witness = make_witness(clock=clock)
    origin_hash = hashlib.sha256(log.origin.encode()).hexdigest()
    with pytest.raises(w.WitnessError) as info:
        witness.checkpoint(origin_hash)
    assert info.value.status == 404  # nothing cosigned yet

    old = 0
    for size in (0, 1, 2, 3, 4, 5, 8, 13, 16, 17, 31, 32, 33, 100, 100):
        clock.now += 7
        note = log.note(size)
        answer = witness.add_checkpoint(log.body(old, size))
        assert_cosigned(answer, note, witness_key, timestamp=clock.now)
        served = witness.checkpoint(origin_hash)
        assert served == note + answer  # the log's signature and the cosignature returned
        both = open_note(served, [log.signer.verifier, witness_key.verifier])
        assert [v.sig_type for v, _, _ in both.verified] == [ED25519, COSIGNATURE_V1]
        assert witness.latest(log.origin)[:2] == (size, log.root(size))
        old = size


def test_the_first_checkpoint_may_come_without_proof_from_old_size_zero(make_witness, log, witness_key):
    witness = make_witness()
    answer = witness.add_checkpoint(log.body(0, 42))
    assert_cosigned(answer, log.note(42), witness_key)
    assert witness.latest(log.origin)[0] == 42


def test_the_timestamp_is_now_never_zero_and_never_goes_back(make_witness, log, witness_key):
    real = make_witness(clock=time.time)
    before = int(time.time())
    ts = assert_cosigned(real.add_checkpoint(log.body(0, 3)), log.note(3), witness_key)
    assert before <= ts <= int(time.time())

    clock = Clock(0)
    other = Log("other.example/log")
    witness = make_witness(other, clock=clock, db=real.db + "-2")
    assert_cosigned(witness.add_checkpoint(other.body(0, 1)), other.note(1), witness_key, timestamp=1)
    clock.now = 500
    assert_cosigned(witness.add_checkpoint(other.body(1, 2)), other.note(2), witness_key, timestamp=500)
    clock.now = 400  # the clock went back: the cosignature keeps the later time
    assert_cosigned(witness.add_checkpoint(other.body(2, 3)), other.note(3), witness_key, timestamp=500)


def test_extension_lines_and_other_signatures_are_kept_out_of_the_served_note(make_witness, log, witness_key):
    witness = make_witness()
    stranger = Signer.generate("someone.example/else", ED25519)
    note = log.note(5, signers=[log.signer, stranger])  # an unknown key's signature: ignored, not served
    answer = witness.add_checkpoint(make_body(0, [], note))
    served = witness.checkpoint(hashlib.sha256(log.origin.encode()).hexdigest())
    assert served == log.note(5) + answer


def test_each_of_several_keys_of_a_log_is_trusted(make_witness, witness_key):
    old_key = Signer.generate("market.example.org/ledger", ED25519)
    new_key = Signer.generate("market.example.org/ledger", ED25519)
    before, after = Log(signer=old_key), Log(signer=new_key)
    witness = make_witness(before, after)
    assert_cosigned(witness.add_checkpoint(before.body(0, 4)), before.note(4), witness_key)
    assert_cosigned(witness.add_checkpoint(after.body(4, 9)), after.note(9), witness_key)


# --- 400 -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", [
    "no empty line", "old 01", "old -1", "old x", "Old 0", "old  0", "old 0 ", "proof not base64", "proof 31 bytes",
    "64 proof lines", "size 01", "two lines", "root 31 bytes", "no signature", "control character", "not ascii",
    "huge size",
])
def test_malformed_requests_are_400(make_witness, log, case):
    witness = make_witness()
    note = log.note(8)
    proof = log.proof(4, 8)
    good_proof = [base64.b64encode(h) for h in proof]
    text = format_checkpoint(log.origin, 8, log.root(8))
    bodies = {
        "no empty line": b"old 0\n" + note.replace(b"\n\n", b"\n"),
        "old 01": b"old 04\n" + b"\n".join(good_proof) + b"\n\n" + note,
        "old -1": b"old -1\n\n" + note,
        "old x": b"old x\n\n" + note,
        "Old 0": b"Old 0\n\n" + note,
        "old  0": b"old  0\n\n" + note,
        "old 0 ": b"old 0 \n\n" + note,
        "proof not base64": b"old 4\n" + b"!!!!\n" + b"\n".join(good_proof[1:]) + b"\n\n" + note,
        "proof 31 bytes": b"old 4\n" + base64.b64encode(b"x" * 31) + b"\n\n" + note,
        "64 proof lines": b"old 4\n" + b"".join(base64.b64encode(bytes([i]) * 32) + b"\n" for i in range(64))
                          + b"\n" + note,
        "size 01": b"old 0\n\n" + sign_note(text.replace(b"\n8\n", b"\n08\n"), [log.signer]),
        "two lines": b"old 0\n\n" + sign_note(f"{log.origin}\n8\n".encode(), [log.signer]),
        "root 31 bytes": b"old 0\n\n" + sign_note(f"{log.origin}\n8\n{base64.b64encode(b'r' * 31).decode()}\n"
                                                  .encode(), [log.signer]),
        "no signature": b"old 0\n\n" + text + b"\n",
        "control character": b"old 0\n\n" + note.replace(b"ledger\n", b"ledger\r\n", 1),
        "not ascii": "old \u0661\n\n".encode() + note,
        "huge size": b"old 0\n\n" + sign_note(f"{log.origin}\n{2 ** 63}\n{base64.b64encode(EMPTY_ROOT).decode()}\n"
                                               .encode(), [log.signer]),
    }
    assert status_of(witness, bodies[case]) == 400
    assert witness.latest(log.origin) is None


def test_63_proof_lines_are_read_64_are_not(make_witness, log):
    witness = make_witness()
    witness.add_checkpoint(log.body(0, 4))
    junk = [bytes([i]) * 32 for i in range(64)]
    assert status_of(witness, make_body(4, junk[:63], log.note(8))) == 422  # parsed, and the proof fails
    assert status_of(witness, make_body(4, junk, log.note(8))) == 400


def test_an_old_size_above_the_checkpoint_size_is_400_and_logged(make_witness, log):
    lines = []
    witness = make_witness(lines=lines)
    witness.add_checkpoint(log.body(0, 4))
    assert status_of(witness, make_body(9, [], log.note(8))) == 400
    assert len(lines) == 1 and "refused (400)" in lines[0] and log.origin in lines[0]
    assert witness.latest(log.origin)[0] == 4


# --- 403, 404 --------------------------------------------------------------------------------------------------

def test_no_signature_by_a_trusted_key_is_403(make_witness, log):
    witness = make_witness()
    impostor = Signer.generate(log.origin, ED25519)  # the log's name, another key (so another key id)
    assert status_of(witness, make_body(0, [], log.note(3, signers=[impostor]))) == 403
    other_log = Log("other.example/log")
    witness = make_witness(log, other_log, db=witness.db + "-2")
    # The other trusted log's key over this origin's checkpoint: not a key trusted for this origin.
    assert status_of(witness, make_body(0, [], log.note(3, signers=[other_log.signer]))) == 403
    assert witness.latest(log.origin) is None


def test_a_failing_signature_of_a_trusted_key_is_403_even_beside_a_good_one(make_witness, log):
    witness = make_witness()
    good = log.note(3)
    text, sig_line = good.split(b"\n\n")
    raw = bytearray(base64.b64decode(sig_line.split(b" ")[-1]))
    raw[10] ^= 1
    bad_line = sig_line.rsplit(b" ", 1)[0] + b" " + base64.b64encode(bytes(raw)) + b"\n"
    assert status_of(witness, make_body(0, [], text + b"\n\n" + bad_line)) == 403
    second = Signer.generate(log.origin, ED25519)
    witness = make_witness(log, Log(signer=second), db=witness.db + "-2")
    both = log.note(3, signers=[log.signer, second])
    assert witness.add_checkpoint(make_body(0, [], both))
    name, sig = both.split(b"\n")[-2].rsplit(b" ", 1)  # the second key's line
    raw = bytearray(base64.b64decode(sig))
    raw[-1] ^= 1
    corrupt = both.replace(sig, base64.b64encode(bytes(raw)))
    assert status_of(witness, make_body(3, [], corrupt)) == 403  # the first key's signature verifies
    assert witness.add_checkpoint(make_body(3, [], both))


def test_an_unknown_origin_is_404(make_witness, log):
    witness = make_witness()
    stranger = Log("stranger.example/log")
    assert status_of(witness, stranger.body(0, 2)) == 404
    with pytest.raises(w.WitnessError) as info:
        witness.checkpoint(hashlib.sha256(stranger.origin.encode()).hexdigest())
    assert info.value.status == 404


# --- 409 -------------------------------------------------------------------------------------------------------

def test_a_stale_old_size_is_409_with_the_latest_size(make_witness, log):
    witness = make_witness()
    with pytest.raises(w.WitnessError) as info:
        witness.add_checkpoint(log.body(3, 5))  # never cosigned: the latest size is 0
    assert (info.value.status, info.value.body, info.value.content_type) == (409, b"0\n", "text/x.tlog.size")
    witness.add_checkpoint(log.body(0, 5))
    witness.add_checkpoint(log.body(5, 9))
    for old, size in ((5, 12), (0, 12), (10, 12), (0, 0), (5, 9)):
        with pytest.raises(w.WitnessError) as info:
            witness.add_checkpoint(log.body(old, size))
        assert (info.value.status, info.value.body, info.value.content_type) == (409, b"9\n", "text/x.tlog.size")
    assert witness.latest(log.origin)[0] == 9
    assert witness.refusals() == []  # a stale client is no evidence of anything


def test_a_409_whose_checkpoint_forks_the_cosigned_one_is_kept(make_witness, log):
    witness = make_witness()
    witness.add_checkpoint(log.body(0, 6))
    fork = Log(tag="fork", signer=log.signer)
    assert status_of(witness, fork.body(2, 6)) == 409  # wrong old size, but size 6 with another root
    [kept] = witness.refusals(log.origin)
    assert kept["status"] == 409 and kept["size"] == 6 and kept["note"] == fork.note(6).decode()
    assert kept["latest_note"].startswith(log.note(6).decode())


# --- 422 -------------------------------------------------------------------------------------------------------

def test_a_proof_from_old_size_zero_is_422(make_witness, log):
    witness = make_witness()
    assert status_of(witness, log.body(0, 8, proof=log.proof(4, 8))) == 422
    assert witness.latest(log.origin) is None


def test_a_checkpoint_of_size_zero_must_have_the_empty_root(make_witness, log, witness_key):
    witness = make_witness()
    wrong = log.note(0, root=hashlib.sha256(b"x").digest())
    assert status_of(witness, make_body(0, [], wrong)) == 422
    [kept] = witness.refusals()
    assert kept["size"] == 0 and kept["note"] == wrong.decode()
    assert_cosigned(witness.add_checkpoint(log.body(0, 0)), log.note(0), witness_key)
    assert witness.latest(log.origin)[:2] == (0, EMPTY_ROOT)


def test_a_proof_that_does_not_verify_is_422_and_kept_with_the_cosigned_checkpoint(make_witness, log):
    lines = []
    witness = make_witness(lines=lines)
    witness.add_checkpoint(log.body(0, 5))
    cosigned = witness.latest(log.origin)[2]
    fork = Log(tag="fork", signer=log.signer)  # the same key signs another history: a fork
    assert status_of(witness, fork.body(5, 9, proof=fork.proof(5, 9))) == 422
    proof = log.proof(5, 9)
    proof[0] = hashlib.sha256(proof[0]).digest()
    assert status_of(witness, log.body(5, 9, proof=proof)) == 422  # a damaged proof
    assert status_of(witness, log.body(5, 9, proof=log.proof(5, 9)[:-1])) == 422  # a short one
    assert status_of(witness, log.body(5, 9, proof=log.proof(5, 10))) == 422  # another size's
    assert witness.latest(log.origin)[:2] == (5, log.root(5))

    refused = witness.refusals(log.origin)
    assert [r["status"] for r in refused] == [422, 422]  # the fork, and log.note(9) once (three requests)
    assert refused[0]["note"] == fork.note(9).decode() and refused[0]["times"] == 1
    assert refused[0]["latest_note"] == cosigned.decode()
    assert refused[0]["request"] == fork.body(5, 9).decode()
    assert refused[1]["note"] == log.note(9).decode() and refused[1]["times"] == 3
    assert len(lines) == 4 and all("refused (422)" in line for line in lines)
    assert witness.add_checkpoint(log.body(5, 9))  # the right proof still works


def test_the_same_size_with_another_root_is_422_and_kept(make_witness, log, witness_key):
    witness = make_witness()
    witness.add_checkpoint(log.body(0, 7))
    fork = Log(tag="fork", signer=log.signer)
    assert status_of(witness, fork.body(7, 7)) == 422
    [kept] = witness.refusals()
    assert kept["status"] == 422 and kept["root"] == base64.b64encode(fork.root(7)).decode()
    assert kept["latest_note"].startswith(log.note(7).decode())
    assert status_of(witness, log.body(7, 7, proof=[log.root(7)])) == 422  # equal sizes take no proof
    assert_cosigned(witness.add_checkpoint(log.body(7, 7)), log.note(7), witness_key)  # the same root: cosigned


# --- atomicity and persistence ---------------------------------------------------------------------------------

class SlowWitness(w.Witness):
    """Holds its first cosignature (inside the recording transaction) until the test lets it go."""

    entered: threading.Event | None = None
    release: threading.Event | None = None

    def _cosign(self, text: bytes, timestamp: int) -> str:
        if self.entered is not None and not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(10)
        return super()._cosign(text, timestamp)


def test_two_requests_from_one_old_size_cannot_both_win(make_witness, log, witness_key):
    """The race of tlog-witness.md: request A (size 6) is between its check and its write when request B (size 9,
    the same old size) arrives.  B must wait and get 409, never a cosignature, and A's size must stay."""
    witness = make_witness(cls=SlowWitness)
    witness.add_checkpoint(log.body(0, 3))
    witness.entered, witness.release = threading.Event(), threading.Event()
    results = {}

    def submit(name, size):
        try:
            results[name] = (200, witness.add_checkpoint(log.body(3, size)))
        except w.WitnessError as exc:
            results[name] = (exc.status, exc.body)

    a = threading.Thread(target=submit, args=("a", 6))
    a.start()
    assert witness.entered.wait(10)
    b = threading.Thread(target=submit, args=("b", 9))
    b.start()
    b.join(0.5)
    assert b.is_alive(), "request B must wait for A's transaction"
    witness.release.set()
    a.join(10)
    b.join(10)
    assert results["a"][0] == 200
    assert_cosigned(results["a"][1], log.note(6), witness_key)
    assert results["b"] == (409, b"6\n")
    assert witness.latest(log.origin)[:2] == (6, log.root(6))


def test_many_concurrent_requests_from_one_old_size_one_wins(make_witness, log):
    witness = make_witness()
    witness.add_checkpoint(log.body(0, 10))
    barrier = threading.Barrier(8)
    results = []

    def submit(size):
        barrier.wait()
        try:
            witness.add_checkpoint(log.body(10, size))
            results.append((200, size))
        except w.WitnessError as exc:
            results.append((exc.status, exc.body))

    threads = [threading.Thread(target=submit, args=(11 + i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    [(_, winner)] = [r for r in results if r[0] == 200]
    assert sorted(r for r in results if r[0] != 200) == [(409, f"{winner}\n".encode())] * 7
    assert witness.latest(log.origin)[0] == winner


def test_the_state_survives_a_restart(make_witness, log, witness_key, tmp_path):
    first = make_witness()
    first.add_checkpoint(log.body(0, 4))
    answer = first.add_checkpoint(log.body(4, 11))
    fork = Log(tag="fork", signer=log.signer)
    status_of(first, fork.body(11, 11))
    del first
    again = make_witness()
    assert again.latest(log.origin) == (11, log.root(11), log.note(11) + answer)
    assert again.checkpoint(hashlib.sha256(log.origin.encode()).hexdigest()) == log.note(11) + answer
    assert len(again.refusals()) == 1
    with pytest.raises(w.WitnessError) as info:
        again.add_checkpoint(log.body(4, 12))
    assert info.value.body == b"11\n"
    assert_cosigned(again.add_checkpoint(log.body(11, 12)), log.note(12), witness_key)


def test_only_witness_and_log_keys_of_the_right_types_are_accepted(tmp_path, log, witness_key):
    with pytest.raises(ValueError):
        w.Witness(log.signer, [log.signer.verifier], tmp_path / "a.sqlite3")  # a type 0x01 witness key
    with pytest.raises(ValueError):
        w.Witness(witness_key, [witness_key.verifier], tmp_path / "b.sqlite3")  # a cosigner key as a log key


# --- HTTP ------------------------------------------------------------------------------------------------------

@pytest.fixture
def server(make_witness):
    srv = w.serve_in_thread(make_witness(), "127.0.0.1:0", prefix="/w")
    yield srv
    srv.shutdown()
    srv.server_close()


def connect(srv) -> http.client.HTTPConnection:
    host, port = srv.server_address[:2]
    return http.client.HTTPConnection(host, port, timeout=10)


def request(conn, method, path, body=None, headers=None):
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    return response.status, response.getheader("Content-Type"), response.read(), response


def test_http_answers_on_one_kept_alive_connection(server, log, witness_key):
    conn = connect(server)
    hash_path = f"/w/{hashlib.sha256(log.origin.encode()).hexdigest()}/checkpoint"
    assert request(conn, "GET", hash_path)[0] == 404
    sock = conn.sock
    status, ctype, answer, _ = request(conn, "POST", "/w/add-checkpoint", log.body(0, 5))
    assert status == 200 and ctype.startswith("text/plain")
    assert_cosigned(answer, log.note(5), witness_key)
    status, ctype, body, _ = request(conn, "POST", "/w/add-checkpoint", log.body(2, 8))
    assert (status, ctype, body) == (409, "text/x.tlog.size", b"5\n")
    assert request(conn, "POST", "/w/add-checkpoint", b"old 0\n")[0] == 400
    assert request(conn, "POST", "/w/add-checkpoint", Log("x.example/y").body(0, 1))[0] == 404
    assert request(conn, "POST", "/w/add-checkpoint", log.body(0, 9, note=log.note(9, signers=[
        Signer.generate(log.origin, ED25519)])))[0] == 403
    assert request(conn, "POST", "/w/add-checkpoint", log.body(5, 8, proof=log.proof(4, 8)))[0] == 422
    status, _, served, _ = request(conn, "GET", hash_path)
    assert status == 200 and served == log.note(5) + answer
    status, _, empty, response = request(conn, "HEAD", hash_path)
    assert status == 200 and empty == b"" and int(response.getheader("Content-Length")) == len(served)
    assert conn.sock is sock  # every answer on the first connection
    conn.close()


def test_http_wrong_methods_paths_and_sizes(server, log):
    conn = connect(server)
    status, _, _, response = request(conn, "GET", "/w/add-checkpoint")
    assert status == 405 and response.getheader("Allow") == "POST"
    hash_path = f"/w/{hashlib.sha256(log.origin.encode()).hexdigest()}/checkpoint"
    status, _, _, response = request(conn, "POST", hash_path, log.body(0, 1))
    assert status == 405 and response.getheader("Allow") == "GET, HEAD"
    assert request(conn, "PUT", "/w/add-checkpoint", log.body(0, 1))[0] == 405
    assert request(conn, "DELETE", hash_path)[0] == 405
    assert request(conn, "GET", "/add-checkpoint")[0] == 404  # outside the prefix
    assert request(conn, "GET", "/w/" + "A" * 64 + "/checkpoint")[0] == 404  # the hash is lowercase hex
    sock = conn.sock
    assert request(conn, "POST", "/w/add-checkpoint", log.body(0, 1))[0] == 200  # bodies were skipped
    assert conn.sock is sock
    status, _, _, response = request(conn, "POST", "/w/add-checkpoint", b"x" * (w.MAX_BODY + 1))
    assert status == 413 and response.getheader("Connection") == "close"
    conn.close()

    conn = connect(server)
    conn.putrequest("POST", "/w/add-checkpoint")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    conn.send(b"0\r\n\r\n")
    assert conn.getresponse().status == 411
    conn.close()

    # A too large body announced with Expect: 100-continue is refused at once (no "100 Continue" first).
    with socket.create_connection(server.server_address[:2], timeout=10) as sock:
        sock.sendall(f"POST /w/add-checkpoint HTTP/1.1\r\nHost: x\r\nContent-Length: {w.MAX_BODY + 1}\r\n"
                     f"Expect: 100-continue\r\n\r\n".encode())
        assert sock.recv(100).startswith(b"HTTP/1.1 413 ")
    with socket.create_connection(server.server_address[:2], timeout=10) as sock:  # a small one goes on
        sock.sendall(b"POST /w/add-checkpoint HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n"
                     b"Expect: 100-continue\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 100 ")
        sock.sendall(b"old 0\n\n")
        assert b"HTTP/1.1 400 " in sock.recv(1000)


# --- the real process ------------------------------------------------------------------------------------------

def cli_command() -> list[str]:
    script = Path(sys.executable).parent / "ldpmarket-client"
    return [str(script)] if script.exists() else [sys.executable, "-m", "ldpmarket_client"]


class Process:
    """``ldpmarket-client witness serve`` on a free loopback port (``--listen 127.0.0.1:0``), its stderr in a
    file."""

    def __init__(self, tmp_path: Path, key: Path, db: Path, logs: list[Log], run: int):
        self.stderr_path = tmp_path / f"serve-{run}.err"
        self.stderr = open(self.stderr_path, "w")
        args = [*cli_command(), "witness", "serve", "--key", str(key), "--db", str(db), "--listen", "127.0.0.1:0"]
        for lg in logs:
            args += ["--log", lg.signer.verifier.vkey]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self.stderr)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            match = re.search(r"listening on http://127\.0\.0\.1:(\d+)/", self.stderr_path.read_text())
            if match:
                self.port = int(match.group(1))
                return
            assert self.proc.poll() is None, self.stderr_path.read_text()
            time.sleep(0.05)
        self.stop()
        raise AssertionError("the witness did not start: " + self.stderr_path.read_text())

    def connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)

    def post(self, body: bytes, conn: http.client.HTTPConnection | None = None):
        own = conn is None
        conn = conn or self.connect()
        try:
            status, ctype, data, _ = request(conn, "POST", "/add-checkpoint", body)
            return status, ctype, data
        finally:
            if own:
                conn.close()

    def stop(self) -> None:
        self.proc.terminate()
        assert self.proc.wait(10) == 0, self.stderr_path.read_text()
        self.stderr.close()


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*cli_command(), *args], capture_output=True, text=True, timeout=60)


def test_the_witness_process(tmp_path):
    key = tmp_path / "witness.key"
    made = run_cli("witness", "keygen", "--name", "owners.example/w1", "--out", str(key))
    assert made.returncode == 0, made.stderr
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    vkey = made.stdout.strip()
    assert run_cli("witness", "vkey", "--key", str(key)).stdout.strip() == vkey
    verifier = parse_vkey(vkey)
    assert verifier.sig_type == COSIGNATURE_V1 and verifier.name == "owners.example/w1"
    again = run_cli("witness", "keygen", "--name", "owners.example/w1", "--out", str(key))
    assert again.returncode != 0 and key.read_text().strip() != ""  # a key is never overwritten
    assert run_cli("witness", "vkey", "--key", str(key)).stdout.strip() == vkey

    log, other = Log(), Log("other.example/log", tag="other")
    db = tmp_path / "witness.sqlite3"
    hash_path = f"/{hashlib.sha256(log.origin.encode()).hexdigest()}/checkpoint"
    server = Process(tmp_path, key, db, [log, other], run=1)
    try:
        # A growing log, on one kept-alive connection: each cosignature verifies with the witness's vkey.
        conn = server.connect()
        old, stamps = 0, []
        for size in (1, 2, 5, 8, 9, 16, 23):
            status, _, answer = server.post(log.body(old, size), conn)
            assert status == 200, answer
            opened = open_note(log.note(size) + answer, [verifier])
            stamps.append(opened.verified[0][1])
            old = size
        assert stamps == sorted(stamps) and stamps[0] > 1_600_000_000
        assert server.post(other.body(0, 3), conn)[0] == 200  # a second log, its own state
        status, _, served, _ = request(conn, "GET", hash_path)
        assert status == 200 and open_note(served, [verifier, log.signer.verifier])
        conn.close()

        # A stale old size: 409 with the right size.
        assert server.post(log.body(9, 30)) == (409, "text/x.tlog.size", b"23\n")
        # A fork: the same size with another root, and a proof from 23 to a forked 30.
        fork = Log(tag="fork", signer=log.signer)
        assert server.post(fork.body(23, 23))[0] == 422
        assert server.post(log.body(23, 30, note=fork.note(30)))[0] == 422
        refused = run_cli("witness", "refused", "--db", str(db))
        assert refused.returncode == 0, refused.stderr
        kept = json.loads(refused.stdout)
        assert [(r["status"], r["size"]) for r in kept] == [(422, 23), (422, 30)]
        assert all(r["latest_note"].startswith(log.note(23).decode()) for r in kept)
        assert "refused (422)" in server.stderr_path.read_text()
    finally:
        server.stop()

    # A restart keeps the state.
    server = Process(tmp_path, key, db, [log, other], run=2)
    try:
        conn = server.connect()
        status, _, served_again, _ = request(conn, "GET", hash_path)
        assert (status, served_again) == (200, served)
        assert server.post(log.body(0, 30), conn) == (409, "text/x.tlog.size", b"23\n")

        # Two different next checkpoints from one old size, at once, on two connections: exactly one wins.
        old = 23
        for round_ in range(10):
            sizes = (old + 1, old + 2 + round_ % 3)
            barrier = threading.Barrier(2)
            results = {}

            def submit(size):
                c = server.connect()
                c.connect()
                barrier.wait()
                results[size] = server.post(log.body(old, size), c)
                c.close()

            threads = [threading.Thread(target=submit, args=(s,)) for s in sizes]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            winners = [s for s in sizes if results[s][0] == 200]
            assert len(winners) == 1, results
            [loser] = [s for s in sizes if s not in winners]
            assert results[loser] == (409, "text/x.tlog.size", f"{winners[0]}\n".encode())
            open_note(log.note(winners[0]) + results[winners[0]][2], [verifier])
            old = winners[0]
        status, _, served, _ = request(conn, "GET", hash_path)
        assert served.startswith(log.note(old))
        conn.close()
    finally:
        server.stop()
    with sqlite3.connect(db) as check:
        assert check.execute("SELECT size FROM checkpoints WHERE origin = ?", (log.origin,)).fetchone() == (old,)
    assert os.path.exists(db)
