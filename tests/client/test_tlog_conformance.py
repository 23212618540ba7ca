"""Conformance of ``ldpmarket_client.tlog`` with C2SP signed notes, checkpoints and cosignatures (issue 29).

Three kinds of evidence:

* known answers: the examples of the specifications (/work/c2sp: signed-note.md, tlog-checkpoint.md,
  tlog-cosignature.md, tlog-witness.md) and the test vectors of Go's ``golang.org/x/mod/sumdb/note``, of
  ``github.com/transparency-dev/formats`` and a real cosigned checkpoint, copied below as literals with the file and
  commit they come from (only the vectors: none of those repositories' code is copied);
* ``SpecNotes``, a second implementation written here from the specifications alone (``hashlib``, ``base64`` and
  ``cryptography``'s Ed25519, nothing of ``tlog``): notes and cosignatures the library signs verify with it, notes it
  signs verify with the library, and both agree on what they accept;
* hypothesis: round trips over random key names, texts and signers, and random bytes that must never raise anything
  but ``NoteError``.

Where the library deliberately differs from Go, the test says so and why (the specification decides).
"""
from __future__ import annotations

import base64
import hashlib
import re
import struct

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ldpmarket_client.tlog import checkpoint as tcp
from ldpmarket_client.tlog import note as tn
from ldpmarket_client.tlog.note import InvalidNoteSignature, NoteError, UnverifiedNote

# ---------------------------------------------------------------------------------------------------------------------
# Vectors.  golang.org/x/mod, sumdb/note/note_test.go at commit fe2ec04f7c3c3aa6fad97631aafcff6e49e2d1db.
GO_PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
GO_TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
GO_PETER_SIG = ("— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6R"
                "yyBwJnAM=\n")
GO_ENOCH_SIG = ("— EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvM"
                "c+QQ=\n")
#: Go slices its strings by bytes: Open's mangled signatures insert "ABCD" after the 60th byte of the line.
GO_ABCD = lambda sig: (sig.encode()[:60] + b"ABCD" + sig.encode()[60:]).decode()  # noqa: E731
GO_PETER_B64 = "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM="
GO_ENOCH_B64 = "rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ="
# TestNewVerifier: "wrong length key, with adjusted key hash" and "unknown algorithm, with adjusted key hash".
GO_BAD_VKEYS = ["PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==",
                "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"]

# github.com/transparency-dev/formats at commit 0b850f1a7b4a5b70deeacac6535e4b8023809d21.
# log/note_test.go: key pairs (vkey, skey) and the sum.golang.org checkpoint with extra signatures (BenchmarkParse).
TD_KEY_PAIRS = [
    ("Log+2271c621+AemuH5ooBpEPcr+W8onrjA1NfuzBVHdezakU81Ekarvs",
     "PRIVATE+KEY+Log+2271c621+AdEIq9FLRQni54Wg68T96VJO+iayOaulswav2DUMKgvQ"),
    ("Known+451c786d+AXAQ0T7lbwuY4ABJ9/MYY9bWV3hmSyOGVt2x42NkmdUH",
     "PRIVATE+KEY+Known+451c786d+AQPRoE2+Z+Ed1HaHBA9F/FfracvcZ2rDU39kCecMEoci"),
    ("KnownAgain+4893b26c+AQ+LR7BFF/F/dkpIBjBpSvT0crkteizuUkavAoGeaYMj",
     "PRIVATE+KEY+KnownAgain+4893b26c+ARhZda/l25zjGZswYLDZsLNRzNpmv5wYTN9IoTr1OJ2+"),
    ("Unknown+fdbb2e08+AWgRIYZ+8x1Vl+1Q+sR8zciNHiYI1SdlBjNw+RV0rots",
     "PRIVATE+KEY+Unknown+fdbb2e08+Aav2knTC6orbhXX8pMWuNiWgO+Wwk2DB+h1eU2Q1W1nU"),
]
# note/note_verifier_test.go, TestSignerVerifierFromEd25519Key.
TD_LOGANDMAP = ("logandmap+38581672+Ab/PCr1eCclRPRMBqw/r5An1xO71MCnImLiospEq6b4l",
                "PRIVATE+KEY+logandmap+38581672+AXJ0FKWOcO2ch6WC8kP705Ed3Gxu7pVtZLhfHAQwp+FE")
SUMDB_VKEY = "sum.golang.org+033de0ae+Ac4zctda0e5eza+HJyk9SxEdh+s3Ux18htTTAD8OuAn8"
SUMDB_NOTE = ("go.sum database tree\n6476701\nmb8QLQIs0Z0yP5Cstq6guj87oXWeC9gEM8oVikmm9Wk=\n\n"
              "— sum.golang.org Az3grsLX85Gz+s1SiTbgkuqxgItqFq7gsMUEyVnrsa9LM7Us9S+1xbFIGu95949rj4nPRYfvimWEPWL+o3Ge"
              "oWwOoAw=\n")
TD_BENCH_VKEYS = ["monkeys+db4d9f7e+AULaJMvTtDLHPUcUrjdDad9vDlh/PTfC2VV60JUtCfWT",
                  "bananas+cf639f13+AaPjhFnPCQnid/Ql32KWhmh+uk72FVRfK+2DLmO3BI3M",
                  "witness+f13a86db+AdYV1Ztajd9BvyjP2HgpwrqYL6TjOwIjGMOq8Bu42xbN"]
TD_BENCH_SIGS = [
    "— monkeys 202ffh9ve46Mqbhuyb4wnC2Pwdan5EsXQym/tF1ggXJqhjGosU4T5intH4iKMRgDLxrnXuIjRaU2NbvAnaepM6Y+8ww=",
    "— bananas z2OfE+2bbsBZ7NLgfuslc0v7NFW2QyexJ7fhePpoL2N/P7N/COd5S+JNHbQEAlYzz2C5sg0E+x/MggS1mDR6t3/9rQw=",
    "— witness 8TqG25yWGFLdT7WPf/WoyeG3LwqtkXP+8S3yykOVm6EMh4hPgCke6eSVPU4BdtXNMPJBXKF+UpDbGgCdcpR8SVSoqAU=",
    "— random1 8TqG25yWGFLdT7WPf/WoyeG3LwqtkXP+8S3yykOVm6EMh4hPgCke6eSVPU4BdtXNMPJBXKF+UpDbGgCdcpR8SVSoqAU=",
    "— random2 8TqG25yWGFLdT7WPf/WoyeG3LwqtkXP+8S3yykOVm6EMh4hPgCke6eSVPU4BdtXNMPJBXKF+UpDbGgCdcpR8SVSoqAU=",
]
# note/note_cosigv1_test.go, TestCoSigV1NewVerifier: vkeys that parse (an Ed25519 key, a native 0x04 witness key).
TD_TEST_VKEY = "TEST+7997405c+AQcC+FTVKf0jlTdHDY3rbevmnKxxPjigCXlVtGe6RIr6"
REMORA_VKEY = "remora.n621.de+da77ade7+BOvN63jn/bLvkieywe8R6UYAtVtNbZpXh34x7onlmtw2"
# note/note_verifier_test.go: the sigstore key material (ECDSA, type 0x02) and a static-CT key (type 0x05).
SIGSTORE_KEY_MATERIAL = ("AjBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABNhtmPtrWm3U1eQXBogSMdGvXwBcK5AW5i0hrZLOC96l+smGNM7nwZ4Q"
                         "vFK/4sueRoVj//QP22Ni4Qt9DPfkWLc=")
SIGSTORE_VKEY = "rekor.sigstore.dev+c0d23d6a+" + SIGSTORE_KEY_MATERIAL
STATIC_CT_VKEY = ("ct.googleapis.com/logs/us1/argon2024+7deb49d0+BTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABB25bKnLaZTFXOa2pg"
                  "O70rjcVEMXKJkMBgFQHZ1kwFlGK9zIAx0FtC2oCfeZQe0E++VXuiYE9hFSzhRlOy92K8A=")
TD_BAD_VKEYS = ["bananas.sigstore.dev+12344556",  # wrong number of parts
                "rekor.sigstore.dev+12345678+THIS_IS_NOT_BASE64!",
                "rekor.sigstore.dev+12345678+AwEB",  # invalid algorithm
                "rekor.sigstore.dev+NOT_A_NUMBER+" + SIGSTORE_KEY_MATERIAL,
                "rekor.sigstore.dev+00000000+" + SIGSTORE_KEY_MATERIAL]
# note/note_cosigv1_test.go, TestCoSigV1Timestamp: a cosignature (key id, then its time 1727964367) and a 0x01
# signature (too short to be a cosignature).
TD_COSIG_B64 = ("ZGhGuQAAAABm/qTPeyKXD+R2rzyQsxPiP8mXum7qq/iF0u4vanlqJyocWODBt97w9uL+8qT7S5gxEHWWOworDcFiEBYJXORm"
                "nFBOBA==")
TD_ED25519_SIG_B64 = "eQjRQm6eSKzFoiYalgwCPXu2y3ijtg68is9M46JKxuZB+dRfTmeQeDBoXnvxZx2ugnkyV+MUMLXpWs1hPb/W/4xkNQY="
TD_COSIGNED_TEXT = b"test\n123\nf+7CoKgXKE/tNys9TTXcr/ad6U/K3xvznmzew9y6SP0=\n"

# A real cosigned checkpoint: github.com/florolf/tlog-scales, tests/test_signing.py at commit
# dfd5c4bf3b0c9703a6760e52e80e2515ee53f86e (TestCheckpointVerification): the log's Ed25519 (0x01) signature, an
# RFC 6962 STH signature (0x05) under the log's name, and five witnesses' 0x04 cosignatures, of which remora.n621.de's
# key is published (it is also TestCoSigV1NewVerifier's native 0x04 key above).
ARCHE_VKEY = "arche2025h1.staging.ct.transparency.dev+ba2f06c0+AU0vHmlGCS/PdN8b2OaGmKprLI8HKM+dJ472xgFYh15f"
ARCHE_TEXT = b"arche2025h1.staging.ct.transparency.dev\n1432088532\nU7WM79jrzyhGZ5/GUBTpM7NzwdyfFx61t3RovgcC4Ro=\n"
ARCHE_SIGS = [
    "— arche2025h1.staging.ct.transparency.dev zTM8sQAAAZ5W0WdjBAMARjBEAiBjW5IQf9pvsYLfQFX6hoGREPMHbdQ3urbllzalApkpt"
    "QIgIpwtEroeW2BXaHAI4kJXFbon5Ch9MNL5zRNZ55lvGt0=",
    "— arche2025h1.staging.ct.transparency.dev ui8GwCF1+kWqZrxGdhj4aX3gcw7XUlXQQabg/27lefwhUkzbC3NygNI75MdhL1bfTW9g8E"
    "i59RA23oHP7Ry1k3ZFWwQ=",
    "— transparency.dev/DEV:witness-little-garden 2AQqhwAAAABqEiEgzgFIqqhbUoDwjMWE6UP8nd8/KYTzwZ2rhIgcqoXHAwVkjZr4Ascy"
    "lP3v7sEodkRAErumC2q44vdgJY096st5BQ==",
    "— witness1.smartit.nu/witness1 pIyCDwAAAABqEiEghIp82KWebrw7/oHQwlTAm3g2RKS4+eebl8eO0WH+/iEcxZ75W3u5hNI7TOQtmJbqm"
    "NWVuE0tgh0XwzdZsDsUAQ==",
    "— remora.n621.de 2net5wAAAABqEiEgPlfF3V06o0Y+fHM+J5J9s27wgxxcOVSpZ/2g/KSiXCg9DEZI+aVCIobWX9sXTynk5XeU/zZ0WBxtqB0"
    "DrAWfBw==",
    "— witness.stagemole.eu Z/euoAAAAABqEiEgw0i+7g2ENfDAWHmtRzCfKTHSDwYDJA2NmKeGi9Y8FtEyOUvVr+AJmIY/2TUFucgKi7lI7cUiO"
    "vKFYe/TmN9DAg==",
]
ARCHE_NOTE = ARCHE_TEXT + b"\n" + "".join(s + "\n" for s in ARCHE_SIGS).encode()
REMORA_TIME = 0x6A122120  # the 8 bytes after remora's key id: 1779573024

# The specifications' examples (/work/c2sp).
SPEC_FOO_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"  # signed-note.md
SPEC_FOO_NOTE = ("This is an example message.\n\n— example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTg"
                 "K7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n").encode()
SPEC_QUASIMODO_NOTE = ("Ognuno sta solo sul cuor della terra\ntrafitto da un raggio di sole:\n\ned è subito sera.\n\n"
                       "— quasimodo.example/salvatore NnugSzTjtVAewIS+Z/iJhUPeFDkO/5QQ2i5ddnGITLlC+EhfLW9oJKONrMouFSQ"
                       "U0xMcXxj99ihAQwaqP3ZekRwNtIc=\n").encode()
SOFA_TEXT = b"example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
SOFA_LOG_SIG = ("— example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzG"
                "ku9nTo+zyWE+xeMcTOAYQ8=\n")
SOFA_W1_SIG = ("— witness.example.com/w1 jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJsX3b2oyin1nPZq"
               "hf5nNo0xUe+mbIUBkBIfZ+qnA==\n")
SOFA_CHECKPOINT = SOFA_TEXT + b"\n" + SOFA_LOG_SIG.encode()  # tlog-checkpoint.md
SOFA_COSIGNED = SOFA_CHECKPOINT + SOFA_W1_SIG.encode()  # tlog-cosignature.md
SOFA_COSIGNED_MESSAGE = (b"cosignature/v1\ntime 1679315147\nexample.com/behind-the-sofa\n20852163\n"  # the same
                         b"CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n")
WITNESS_RESPONSE = (  # tlog-witness.md, the example response body
    "— witness.example/w1 CMp+6LWBU0anHGH5aNDTJkH/gj79sG+T6+iP2ThYN5krrDJbR1HDnucjL39QsZTSvVjyQLrdk3DXDqI5G2HgLatVs0pW"
    "h6Up69HVOw==\n"
    "— witness.example/w1 I7rEps0pvK2UqkS2gSpVUDhrhVtQV9lgF6pRrWAvjJHjyWpW7VcE3SiOlVlbQNt64vWhO+DlkL0+UfzuOBMh9ChdMkP1"
    "vi/lCAsmlw==\n"
    "— witness.example/w2 AWui8Sk55XjYLOijihBjhqEH6nS1ndDymE0a+6idX7pLcnoB+dhnz0854aLZgrrKbYKA7nC3HNJhm/kWl7oJlqU3rXXv"
    "pysAdyP3wQ==\n").encode()


# ---------------------------------------------------------------------------------------------------------------------
# The independent implementation, from signed-note.md and tlog-cosignature.md only.

#: Unicode's White_Space property (PropList.txt): what a key name must not hold, with "+" and U+0000-U+001F.
WHITE_SPACE = frozenset(map(chr, [*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028,
                                  0x2029, 0x202F, 0x205F, 0x3000]))
#: RFC 4648 section 4 base64, padded: whole quanta, "=" only to pad the last one.
BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")


class SpecError(Exception):
    """The second implementation refuses a note or key."""


def spec_valid_name(name: str) -> bool:
    return bool(name) and all(c not in WHITE_SPACE and c != "+" and c >= " " for c in name)


class SpecNotes:
    """Signed notes with Ed25519 (0x01) and timestamped Ed25519 cosignatures (0x04), written from the specifications.
    The class attributes are the details a wrong implementation gets wrong (the broken variants below change them)."""

    ID_SEPARATOR = b"\n"  # key ID = SHA-256(key name || 0x0A || signature type || public key)[:4]
    ID_BYTES = slice(0, 4)
    ID_ORDER = "big"
    DASH = "\u2014 "
    COSIGNATURE_HEADER = b"cosignature/v1\n"
    TIME_LINE = b"time %d\n"
    TIME_FORMAT = ">Q"
    TYPE_IN_VKEY = True

    def key_id(self, name: str, sig_type: int, public: bytes) -> int:
        digest = hashlib.sha256(name.encode("utf-8") + self.ID_SEPARATOR + bytes([sig_type]) + public).digest()
        return int.from_bytes(digest[self.ID_BYTES], self.ID_ORDER)

    def vkey(self, name: str, sig_type: int, public: bytes) -> str:
        material = (bytes([sig_type]) if self.TYPE_IN_VKEY else b"") + public
        return "%s+%08x+%s" % (name, self.key_id(name, sig_type, public), base64.b64encode(material).decode())

    def skey(self, name: str, sig_type: int, seed: bytes) -> str:
        public = public_of(seed)
        return "PRIVATE+KEY+%s+%08x+%s" % (name, self.key_id(name, sig_type, public),
                                          base64.b64encode(bytes([sig_type]) + seed).decode())

    def parse_vkey(self, vkey: str) -> tuple[str, int, bytes]:
        name, _, rest = vkey.partition("+")
        hex_id, _, material = rest.partition("+")
        if not spec_valid_name(name) or not re.fullmatch(r"[0-9a-f]{8}", hex_id):
            raise SpecError("vkey")
        raw = self.b64(material)
        if len(raw) != 33 or raw[0] not in (1, 4) or self.key_id(name, raw[0], raw[1:]) != int(hex_id, 16):
            raise SpecError("vkey")
        return name, raw[0], raw[1:]

    def b64(self, text: str) -> bytes:
        if not BASE64.fullmatch(text):
            raise SpecError("base64")
        return base64.b64decode(text)

    def message(self, text: bytes, sig_type: int, timestamp: int) -> bytes:
        if sig_type == 4:
            return self.COSIGNATURE_HEADER + self.TIME_LINE % timestamp + text
        return text

    def signature_line(self, text: bytes, name: str, sig_type: int, seed: bytes, timestamp: int = 0) -> str:
        key = Ed25519PrivateKey.from_private_bytes(seed)
        sig = key.sign(self.message(text, sig_type, timestamp))
        if sig_type == 4:
            sig = struct.pack(self.TIME_FORMAT, timestamp) + sig
        key_id = self.key_id(name, sig_type, public_of(seed)).to_bytes(4, "big")
        return self.DASH + name + " " + base64.b64encode(key_id + sig).decode() + "\n"

    def sign(self, text: bytes, keys, timestamp: int = 0) -> bytes:
        """``keys``: (name, type, seed) triples."""
        return text + b"\n" + "".join(self.signature_line(text, *k, timestamp) for k in keys).encode()

    def open(self, note: bytes, known) -> tuple[bytes, list[tuple[str, int, int]]]:
        """``known``: (name, type, public key) triples.  The text and (name, type, timestamp) of each verified
        signature; ``SpecError`` if the note is malformed, a known key's signature fails, or none verifies."""
        try:
            decoded = note.decode("utf-8")
        except UnicodeDecodeError:
            raise SpecError("not UTF-8") from None
        if any(c < " " and c != "\n" for c in decoded):
            raise SpecError("control character")
        split = note.rfind(b"\n\n")
        if split < 0:
            raise SpecError("no blank line")
        text, block = note[:split + 1], note[split + 2:].decode("utf-8")
        if not block.endswith("\n"):
            raise SpecError("no signature, or no final newline")
        lines = block[:-1].split("\n")
        if len(lines) > 100:  # Go's limit; the specification asks for at least 16
            raise SpecError("too many signatures")
        keys = {(name, self.key_id(name, t, pub)): (t, pub) for name, t, pub in known}
        verified = []
        for line in lines:
            if not line.startswith(self.DASH):
                raise SpecError("not a signature line")
            name, space, b64 = line[len(self.DASH):].partition(" ")
            if not space or not spec_valid_name(name):
                raise SpecError("bad signature line")
            raw = self.b64(b64)
            if len(raw) < 5:
                raise SpecError("short signature")
            found = keys.get((name, int.from_bytes(raw[:4], "big")))
            if found is None:
                continue  # an unknown key: ignored
            sig_type, public = found
            sig, timestamp = raw[4:], 0
            if sig_type == 4:
                if len(sig) != 72:
                    raise SpecError("cosignature length")
                (timestamp,), sig = struct.unpack(self.TIME_FORMAT, sig[:8]), sig[8:]
                if timestamp >= 2 ** 63:
                    raise SpecError("timestamp")
            try:
                Ed25519PublicKey.from_public_bytes(public).verify(sig, self.message(text, sig_type, timestamp))
            except InvalidSignature:
                raise SpecError(f"signature of {name} fails") from None
            verified.append((name, sig_type, timestamp))
        if not verified:
            raise SpecError("no verified signature")
        return text, verified


def public_of(seed: bytes) -> bytes:
    return Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes(serialization.Encoding.Raw,
                                                                               serialization.PublicFormat.Raw)


SPEC = SpecNotes()


def check_interop(spec: SpecNotes, keys, text: bytes, timestamp: int) -> None:
    """The library and ``spec`` agree on ``keys`` ((name, type, seed) triples) and on notes over ``text`` signed by
    them (cosignatures at ``timestamp``): raises ``AssertionError``, ``NoteError`` or ``SpecError`` otherwise."""
    ours = [tn.Signer.from_seed(name, seed, t) for name, t, seed in keys]
    known = [(name, t, public_of(seed)) for name, t, seed in keys]
    expected = [(name, t, timestamp if t == tn.COSIGNATURE_V1 else 0) for name, t, _ in keys]
    for signer, (name, t, public), (_, _, seed) in zip(ours, known, keys):
        assert signer.key_id == spec.key_id(name, t, public)
        assert signer.verifier.vkey == spec.vkey(name, t, public)
        assert signer.skey == spec.skey(name, t, seed)
        assert tn.parse_vkey(spec.vkey(name, t, public)) == signer.verifier
        assert spec.parse_vkey(signer.verifier.vkey) == (name, t, public)
        assert tn.parse_skey(spec.skey(name, t, seed)).verifier == signer.verifier
        assert spec.message(text, t, timestamp) == (tn.cosigned_message(text, timestamp) if t == 4 else text)
    # The library signs, the specification's implementation verifies ...
    signed = tn.sign_note(text, ours, timestamp)
    assert spec.open(signed, known) == (text, expected)
    # ... and the other way round.
    note = tn.open_note(spec.sign(text, keys, timestamp), [s.verifier for s in ours])
    assert note.text == text
    assert [(v.name, v.sig_type, ts) for v, ts, _ in note.verified] == expected
    assert not note.unverified


# Broken variants of the second implementation: each must make check_interop fail (the tests can fail).
BROKEN = {
    "key id separator": type("WrongSeparator", (SpecNotes,), {"ID_SEPARATOR": b" "}),
    "key id bytes": type("WrongIdBytes", (SpecNotes,), {"ID_BYTES": slice(1, 5)}),
    "key id byte order": type("LittleEndianId", (SpecNotes,), {"ID_ORDER": "little"}),
    "vkey without type": type("NoTypeInVkey", (SpecNotes,), {"TYPE_IN_VKEY": False}),
    "cosignature header": type("NoHeaderNewline", (SpecNotes,), {"COSIGNATURE_HEADER": b"cosignature/v1"}),
    "time line": type("TimeWithColon", (SpecNotes,), {"TIME_LINE": b"time: %d\n"}),
    "timestamp byte order": type("LittleEndianTime", (SpecNotes,), {"TIME_FORMAT": "<Q"}),
    "dash": type("HyphenDash", (SpecNotes,), {"DASH": "- "}),
}

SEEDS = [bytes([i]) * 32 for i in range(1, 6)]


@pytest.mark.parametrize("sig_type", [tn.ED25519, tn.COSIGNATURE_V1])
def test_interop_with_the_specification_implementation(sig_type):
    check_interop(SPEC, [("example.com/log", sig_type, SEEDS[0])], SOFA_TEXT, 1679315147)
    check_interop(SPEC, [("a", sig_type, SEEDS[1]), ("w.example/1", 4, SEEDS[2]), ("ключ", 1, SEEDS[3])],
                  GO_TEXT.encode(), 2 ** 63 - 1)


@pytest.mark.parametrize("variant", sorted(BROKEN))
def test_a_broken_specification_implementation_fails(variant):
    """Each deliberate mistake in the second implementation is caught by ``check_interop``: it has teeth."""
    keys = [("example.com/log", 1, SEEDS[0]), ("w.example/1", 4, SEEDS[1])]
    with pytest.raises((AssertionError, NoteError, SpecError)):
        check_interop(BROKEN[variant](), keys, SOFA_TEXT, 1679315147)


def test_the_specification_implementation_verifies_the_known_vectors():
    """The second implementation is itself right: it opens Go's notes, the signed-note example and a real
    cosignature, and refuses a changed one."""
    peter, enoch, foo = (SPEC.parse_vkey(k) for k in (GO_PETER_VKEY, GO_ENOCH_VKEY, SPEC_FOO_VKEY))
    note = (GO_TEXT + "\n" + GO_PETER_SIG + GO_ENOCH_SIG).encode()
    assert SPEC.open(note, [peter, enoch]) == (GO_TEXT.encode(), [("PeterNeumann", 1, 0), ("EnochRoot", 1, 0)])
    assert SPEC.open(SPEC_FOO_NOTE, [foo])[1] == [("example.com/foo", 1, 0)]
    remora = SPEC.parse_vkey(REMORA_VKEY)
    assert SPEC.open(ARCHE_NOTE, [remora])[1] == [("remora.n621.de", 4, REMORA_TIME)]
    with pytest.raises(SpecError):
        SPEC.open(ARCHE_NOTE.replace(b"1432088532", b"1432088533"), [remora])
    seed = tn.parse_skey(GO_PETER_SKEY).private.private_bytes(serialization.Encoding.Raw,
                                                              serialization.PrivateFormat.Raw,
                                                              serialization.NoEncryption())
    assert SPEC.skey("PeterNeumann", 1, seed) == GO_PETER_SKEY
    assert SPEC.sign(GO_TEXT.encode(), [("PeterNeumann", 1, seed)]) == (GO_TEXT + "\n" + GO_PETER_SIG).encode()


# ---------------------------------------------------------------------------------------------------------------------
# Go's golang.org/x/mod/sumdb/note tests.

def test_go_new_verifier():
    v = tn.parse_vkey(GO_PETER_VKEY)
    assert (v.name, v.sig_type, v.key_id) == ("PeterNeumann", tn.ED25519, 0xC74F20A3)
    assert v.vkey == GO_PETER_VKEY
    assert tn.parse_vkey(GO_ENOCH_VKEY).key_id == 0xAF0CFE78


def manglings(key: str) -> list[str]:
    """TestNewVerifier's and TestNewSigner's manglings: every proper substring, and each byte incremented."""
    b = key.encode()
    out = [b[i:j].decode() for i in range(len(b) + 1) for j in range(i + 1, len(b) + 1) if (i, j) != (0, len(b))]
    return out + [(b[:i] + bytes([b[i] + 1]) + b[i + 1:]).decode() for i in range(len(b))]


def test_go_new_verifier_rejects_every_mangling():
    bad = manglings(GO_PETER_VKEY) + GO_BAD_VKEYS
    accepted = []
    for k in bad:
        try:
            tn.parse_vkey(k)
            accepted.append(k)
        except NoteError:
            pass
    assert len(bad) > 2000 and accepted == []


def test_go_new_signer_rejects_every_mangling():
    signer = tn.parse_skey(GO_PETER_SKEY)
    assert (signer.name, signer.key_id) == ("PeterNeumann", 0xC74F20A3)
    assert signer.verifier.vkey == GO_PETER_VKEY and signer.skey == GO_PETER_SKEY
    accepted = []
    for k in manglings(GO_PETER_SKEY):
        try:
            tn.parse_skey(k)
            accepted.append(k)
        except NoteError:
            pass
    assert accepted == []


def test_go_sign():
    want = GO_TEXT + "\n" + GO_PETER_SIG
    assert tn.sign_note(GO_TEXT.encode(), [tn.parse_skey(GO_PETER_SKEY)]) == want.encode()
    with pytest.raises(NoteError):  # "Sign with short text": malformed note
        tn.sign_note(b"abc", [tn.parse_skey(GO_PETER_SKEY)])
    bad_name = tn.Signer("bad name", tn.ED25519, tn.parse_skey(GO_PETER_SKEY).private)
    with pytest.raises(NoteError):  # "Sign with bad signer": invalid signer
        tn.sign_note(GO_TEXT.encode(), [bad_name])


def opened(note: bytes, verifiers) -> tuple[list[tuple[str, int, str]], list[tuple[str, int, str]]]:
    """Go's view of an opened note: (name, key id, base64) of the verified and of the unverified signatures."""
    n = tn.open_note(note, verifiers)

    def b64(s: tn.Signature) -> str:
        return base64.b64encode(struct.pack(">I", s.key_id) + s.signature).decode()

    return ([(s.name, s.key_id, b64(s)) for _, _, s in n.verified],
            [(s.name, s.key_id, b64(s)) for s in n.unverified])


PETER = ("PeterNeumann", 0xC74F20A3, GO_PETER_B64)
ENOCH = ("EnochRoot", 0xAF0CFE78, GO_ENOCH_B64)


def test_go_open():
    peter, enoch = tn.parse_vkey(GO_PETER_VKEY), tn.parse_vkey(GO_ENOCH_VKEY)
    msg = (GO_TEXT + "\n" + GO_PETER_SIG + GO_ENOCH_SIG).encode()
    assert tn.open_note(msg, [peter]).text == GO_TEXT.encode()
    assert opened(msg, [peter]) == ([PETER], [ENOCH])  # one signature verified, one not
    assert opened(msg, [peter, enoch]) == ([PETER, ENOCH], [])
    with pytest.raises(UnverifiedNote):  # both unverified
        tn.open_note(msg, [])
    # Unused duplicated verifier.
    assert opened((GO_TEXT + "\n" + GO_PETER_SIG).encode(), [enoch, peter, enoch]) == ([PETER], [])
    # Go's "duplicated verifier" is an ambiguous-key error; here the same key twice is one key (a different key with
    # the same name and id would need a 32-bit collision).
    assert opened((GO_TEXT + "\n" + GO_ENOCH_SIG).encode(), [enoch, peter, enoch]) == ([ENOCH], [])
    # Too many signatures: 101 is malformed, with or without verifiers; 100 are accepted.
    for verifiers in ([peter], []):
        with pytest.raises(NoteError) as exc:
            tn.open_note((GO_TEXT + "\n" + GO_PETER_SIG * 101).encode(), verifiers)
        assert type(exc.value) is NoteError
    assert tn.open_note((GO_TEXT + "\n" + GO_PETER_SIG * 100).encode(), [peter]).text == GO_TEXT.encode()
    # Invalid signature.
    with pytest.raises(InvalidNoteSignature):
        tn.open_note((GO_TEXT + "\n" + GO_ABCD(GO_PETER_SIG)).encode(), [peter])
    # A verifier whose name or id does not match the line: Go's errMismatchedVerifier needs a Verifiers that returns
    # the wrong key; here keys are looked up by (name, id), so such a line is an unknown key's.
    for line in (GO_PETER_SIG.replace("PeterNeumann", "CarmenSandiego"), GO_PETER_SIG.replace("x08g", "xxxx")):
        with pytest.raises(UnverifiedNote):
            tn.open_note((GO_TEXT + "\n" + line).encode(), [peter])


ENOCH_ABCD = ("EnochRoot", 0xAF0CFE78, "rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n" + "ABCD"
              + "2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=")  # Go's enochABCD
DUPLICATES = (GO_TEXT + "\n" + GO_PETER_SIG + GO_PETER_SIG + GO_ENOCH_SIG + GO_ENOCH_SIG
              + GO_ABCD(GO_ENOCH_SIG)).encode()


def test_go_open_duplicated_signatures_verify():
    """Go's "duplicated verified and unverified signatures": the note opens, its signatures being Peter's (verified)
    and Enoch's (two distinct lines, unverified)."""
    verified, unverified = opened(DUPLICATES, [tn.parse_vkey(GO_PETER_VKEY)])
    assert set(verified) == {PETER} and set(unverified) == {ENOCH, ENOCH_ABCD}


def test_go_open_duplicated_signatures_are_dropped():
    assert opened(DUPLICATES, [tn.parse_vkey(GO_PETER_VKEY)]) == ([PETER], [ENOCH, ENOCH_ABCD])


GO_BAD_MSGS = [
    GO_TEXT,
    GO_TEXT + "\n",
    GO_TEXT + "\n" + GO_PETER_SIG[:-1],
    "\x01" + GO_TEXT + "\n" + GO_PETER_SIG,
    b"\xff" + (GO_TEXT + "\n" + GO_PETER_SIG).encode(),
    GO_TEXT + "\n" + "— Bad Name " + GO_PETER_B64,
    GO_TEXT + "\n" + GO_PETER_SIG + "Unexpected line.\n",
    # Not in Go's list: the bad name with its newline, so the name itself is what is refused.
    GO_TEXT + "\n" + "— Bad Name " + GO_PETER_B64 + "\n",
]


@pytest.mark.parametrize("msg", GO_BAD_MSGS)
def test_go_open_malformed_notes(msg):
    data = msg if isinstance(msg, bytes) else msg.encode()
    with pytest.raises(NoteError) as exc:
        tn.open_note(data, [tn.parse_vkey(GO_PETER_VKEY)])
    assert type(exc.value) is NoteError  # Go's "malformed note", not a signature error
    with pytest.raises(SpecError):
        SPEC.open(data, [SPEC.parse_vkey(GO_PETER_VKEY)])


def test_go_key_name_rule():
    """Go's isValidName: non-empty, no Unicode White_Space, no "+" (the note's rule refuses control characters)."""
    for name in ["a+b", "", "bad name", "tab\tname", "nbsp\u00a0name", "ideographic\u3000space", "line\u2028sep"]:
        with pytest.raises(NoteError):
            tn.check_key_name(name)
    for name in ["PeterNeumann", "example.com/foo", "Señor-1", "zero\u200bwidth", "oid/1.3.6.1.4.1"]:
        assert tn.check_key_name(name) == name


@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=12))
def test_key_names_follow_the_specification(name):
    valid = spec_valid_name(name)
    try:
        tn.check_key_name(name)
        assert valid
    except NoteError:
        assert not valid


# ---------------------------------------------------------------------------------------------------------------------
# transparency-dev/formats tests.

@pytest.mark.parametrize("vkey, skey", TD_KEY_PAIRS + [TD_LOGANDMAP])
def test_transparency_dev_key_pairs(vkey, skey):
    signer = tn.parse_skey(skey)
    assert signer.verifier == tn.parse_vkey(vkey) and signer.verifier.vkey == vkey and signer.skey == skey
    assert signer.verifier.key_id == int(vkey.split("+")[1], 16)
    with pytest.raises(NoteError):  # "Ed25519 public key" given as a private key
        tn.parse_skey(vkey)
    with pytest.raises(NoteError):
        tn.parse_vkey(skey)


@pytest.mark.parametrize("vkey, sig_type", [(TD_TEST_VKEY, tn.ED25519), (REMORA_VKEY, tn.COSIGNATURE_V1),
                                            (GO_PETER_VKEY, tn.ED25519)])
def test_transparency_dev_vkeys(vkey, sig_type):
    assert tn.parse_vkey(vkey).sig_type == sig_type and tn.parse_vkey(vkey).vkey == vkey


@pytest.mark.parametrize("vkey", TD_BAD_VKEYS + [SIGSTORE_VKEY, STATIC_CT_VKEY])
def test_transparency_dev_bad_or_unsupported_vkeys(vkey):
    """The bad keys are refused; the ECDSA (0x02) and RFC 6962 (0x05) keys Go accepts are of types this library does
    not implement (the specification: implement only the types the design needs)."""
    with pytest.raises(NoteError):
        tn.parse_vkey(vkey)


def test_transparency_dev_sumdb_checkpoint():
    note = tn.open_note(SUMDB_NOTE.encode(), [tn.parse_vkey(SUMDB_VKEY)])
    checkpoint = tcp.parse_checkpoint(note.text)
    assert (checkpoint.origin, checkpoint.size) == ("go.sum database tree", 6476701)
    assert checkpoint.root == base64.b64decode("mb8QLQIs0Z0yP5Cstq6guj87oXWeC9gEM8oVikmm9Wk=")
    # BenchmarkParse: the same note with signatures of three more keys, and two copies under unknown names.
    many = SUMDB_NOTE + "".join(s + "\n" for s in TD_BENCH_SIGS)
    verifiers = [tn.parse_vkey(SUMDB_VKEY)] + [tn.parse_vkey(k) for k in TD_BENCH_VKEYS]
    verified, unverified = opened(many.encode(), verifiers)
    assert [v[0] for v in verified] == ["sum.golang.org", "monkeys", "bananas", "witness"]
    assert [u[0] for u in unverified] == ["random1", "random2"]
    assert [v[0] for v in opened(many.encode(), verifiers[:2])[0]] == ["sum.golang.org", "monkeys"]
    assert SPEC.open(many.encode(), [SPEC.parse_vkey(k) for k in [SUMDB_VKEY] + TD_BENCH_VKEYS])[1] == [
        ("sum.golang.org", 1, 0), ("monkeys", 1, 0), ("bananas", 1, 0), ("witness", 1, 0)]


def test_transparency_dev_parse_checkpoint_cases():
    """log/note_test.go TestParseCheckpoint, with a 32-byte root (the library's checkpoints are SHA-256 trees): the
    checkpoint opens when the log signed it, whatever other signatures it carries, and the count of distinct verified
    keys is Go's ``wantSigs``."""
    (log_vk, log_sk), (k1_vk, k1_sk), (k2_vk, k2_sk), (_, unknown_sk) = TD_KEY_PAIRS
    log, k1, k2, unknown = (tn.parse_skey(k) for k in (log_sk, k1_sk, k2_sk, unknown_sk))
    verifiers = [tn.parse_vkey(k) for k in (log_vk, k1_vk, k2_vk)]
    body = tcp.format_checkpoint("TestParseCheckpoint", 42, hashlib.sha256(b"abcdef").digest())

    def parse(text, signers, origin="TestParseCheckpoint"):
        n = tn.open_note(tn.sign_note(text, signers), verifiers)
        if verifiers[0] not in {v for v, _, _ in n.verified}:
            raise NoteError("not signed by the log")
        if tcp.parse_checkpoint(n.text).origin != origin:
            raise NoteError("wrong origin")
        return len({v for v, _, _ in n.verified})

    assert parse(body, [log]) == 1
    assert parse(body, [log, k1]) == 2
    assert parse(body, [log, k1, unknown]) == 2
    assert parse(body, [log, k1, k2]) == 3
    assert parse(body, [log, k1, k1]) == 2  # one verifier signs twice
    assert parse(body, [k2, log, k1]) == 3
    assert parse(body, [log, k1, k2, unknown]) == 3
    with pytest.raises(NoteError):  # no sigs
        tn.sign_note(body, [])
    with pytest.raises(NoteError):  # bad body good sigs
        parse(b"if this is a valid checkpoint then I'll eat my hat\n", [log])
    with pytest.raises(NoteError):  # just known
        parse(body, [k1, k2])
    with pytest.raises(NoteError):  # all sigs but wrong log id
        parse(body, [log, k1, k2, unknown], origin="this is not the logID you are looking for")


def test_transparency_dev_cosignature_timestamp():
    sig = tn.parse_signature_line("— w " + TD_COSIG_B64)
    assert sig.key_id == 0x646846B9 and len(sig.signature) == 72
    assert struct.unpack(">Q", sig.signature[:8])[0] == 1727964367
    # "wrong type of signature": a 64-byte Ed25519 signature is no cosignature, whatever the key.
    short = tn.parse_signature_line("— w " + TD_ED25519_SIG_B64)
    assert len(short.signature) == 64
    assert tn.Verifier("w", tn.COSIGNATURE_V1, public_of(SEEDS[0])).verify(b"x\n", short.signature) is None
    with pytest.raises(NoteError):  # gibberish
        tn.parse_signature_line("— w 5%/$!\n 2")


def test_transparency_dev_cosignatures():
    """note_cosigv1_test.go: a cosignature round trip; it covers extension lines; an Ed25519 (0x01) verifier of the
    same key cannot open a cosigned note (a different key id)."""
    cosigner = tn.Signer.from_seed("test", SEEDS[0], tn.COSIGNATURE_V1)
    note = tn.sign_note(TD_COSIGNED_TEXT, [cosigner], 1727964367)
    assert tn.open_note(note, [cosigner.verifier]).verified[0][1] == 1727964367
    extended = tn.sign_note(TD_COSIGNED_TEXT + b"Extendo\n", [cosigner], 1727964367)
    with pytest.raises(NoteError):  # Go's n[len(n)-2] = '@': the signature's last character, no longer base64
        tn.open_note(extended[:-2] + b"@" + extended[-1:], [cosigner.verifier])
    with pytest.raises(InvalidNoteSignature):
        tn.open_note(extended.replace(b"Extendo", b"Extendi"), [cosigner.verifier])
    with pytest.raises(UnverifiedNote):
        tn.open_note(note, [tn.Signer.from_seed("test", SEEDS[0]).verifier])
    with pytest.raises(NoteError):  # "nobbled"
        tn.open_note(b"nobbled", [cosigner.verifier])


def test_transparency_dev_checkpoint_unmarshal():
    """log/checkpoint_test.go TestUnmarshalLogState: its error cases are errors here too; its valid cases have roots
    that are not 32 bytes ("bananas"), which a SHA-256 log cannot have, and are refused here (so are "trailing
    newlines", which the specification forbids: extension lines MUST be non-empty)."""
    errors = ["Head\n9944\n", "\n9944\ndGhlIHZpZXcgZnJvbSB0aGUgdHJlZSB0b3BzIGlzIGdyZWF0IQ==\n",
              "Log\n123\nYmFuYW5hcw==",
              "Log\nbananas\ndGhlIHZpZXcgZnJvbSB0aGUgdHJlZSB0b3BzIGlzIGdyZWF0IQ==\n",
              "Log\n-34\ndGhlIHZpZXcgZnJvbSB0aGUgdHJlZSB0b3BzIGlzIGdyZWF0IQ==\n", "Log\n123\nThisIsn'tBase64\n",
              # the valid ones, refused here
              "Log\n123\nYmFuYW5hcw==\n", "Banana\n9944\ndGhlIHZpZXcgZnJvbSB0aGUgdHJlZSB0b3BzIGlzIGdyZWF0IQ==\n",
              "Log\n9944\ndGhlIHZpZXcgZnJvbSB0aGUgdHJlZSB0b3BzIGlzIGdyZWF0IQ==\n\n\n\n",
              "Moon Log\n4027504\naXQncyBhIHJvb3QgaGFzaA==\n6086d1a9\nWaxing gibbous\n"]
    for text in errors:
        with pytest.raises(NoteError):
            tcp.parse_checkpoint(text.encode())
    root = hashlib.sha256(b"the view from the tree tops is great!").digest()
    b64 = base64.b64encode(root).decode()
    assert tcp.parse_checkpoint(f"Log\n9944\n{b64}\n".encode()) == tcp.Checkpoint("Log", 9944, root)
    assert tcp.parse_checkpoint(f"Log\n9944\n{b64}\nlots\nof\nlines\n".encode()).extensions == ("lots", "of", "lines")
    assert tcp.parse_checkpoint(f"Moon Log\n4027504\n{b64}\n6086d1a9\nWaxing gibbous\n".encode()) == tcp.Checkpoint(
        "Moon Log", 4027504, root, ("6086d1a9", "Waxing gibbous"))
    assert tcp.format_checkpoint("Banana", 9944, root) == f"Banana\n9944\n{b64}\n".encode()  # TestMarshal


def test_transparency_dev_checkpoint_size_too_large():
    with pytest.raises(NoteError):
        tcp.parse_checkpoint(b"Log\n3438945738945739845734895735\n" + base64.b64encode(bytes(32)) + b"\n")


# ---------------------------------------------------------------------------------------------------------------------
# The specifications' examples and a real cosigned checkpoint.

def test_signed_note_example():
    foo = tn.parse_vkey(SPEC_FOO_VKEY)
    assert foo.public == bytes.fromhex("e932791ae6e7a840a46164c904786426d5e7821dd8b29a00d61cae72afdd4da4")
    assert (foo.name, foo.sig_type, foo.key_id) == ("example.com/foo", 1, 0x530D903A)
    note = tn.open_note(SPEC_FOO_NOTE, [foo])
    assert note.text == b"This is an example message.\n" and note.verified[0][0] == foo
    with pytest.raises(InvalidNoteSignature):
        tn.open_note(SPEC_FOO_NOTE.replace(b"example message", b"example massage"), [foo])


def test_signed_note_quasimodo_example():
    """The first example: its key is not published; it parses, its text keeps its inner blank line (the text ends at
    the last blank line), and an unknown key's signature leaves it unverified."""
    note = tn.parse_note(SPEC_QUASIMODO_NOTE)
    assert note.text == ("Ognuno sta solo sul cuor della terra\ntrafitto da un raggio di sole:\n\n"
                         "ed è subito sera.\n").encode()
    [sig] = note.signatures
    assert (sig.name, sig.key_id, len(sig.signature)) == ("quasimodo.example/salvatore", 0x367BA04B, 64)
    assert note.serialize() == SPEC_QUASIMODO_NOTE
    with pytest.raises(UnverifiedNote):
        tn.open_note(SPEC_QUASIMODO_NOTE, [tn.Signer.from_seed("quasimodo.example/salvatore", SEEDS[0]).verifier])


def test_checkpoint_and_cosignature_examples():
    """tlog-checkpoint.md and tlog-cosignature.md: the keys are not published, so the notes are parsed, the
    cosignature's key id and timestamp decoded, and its signed message rebuilt as the specification prints it."""
    checkpoint = tcp.parse_checkpoint(tn.parse_note(SOFA_CHECKPOINT).text)
    assert (checkpoint.origin, checkpoint.size) == ("example.com/behind-the-sofa", 20852163)
    assert checkpoint.text == SOFA_TEXT
    note = tn.parse_note(SOFA_COSIGNED)
    assert note.text == SOFA_TEXT and note.serialize() == SOFA_COSIGNED
    log_sig, w1 = note.signatures
    assert (log_sig.name, log_sig.key_id, len(log_sig.signature)) == ("example.com/behind-the-sofa", 0x033DE0AE, 64)
    assert (w1.name, w1.key_id, len(w1.signature)) == ("witness.example.com/w1", 0x8D66CF3F, 72)
    timestamp = struct.unpack(">Q", w1.signature[:8])[0]
    assert timestamp == 1679315147
    assert tn.cosigned_message(note.text, timestamp) == SOFA_COSIGNED_MESSAGE
    assert SPEC.message(note.text, 4, timestamp) == SOFA_COSIGNED_MESSAGE
    # Keys of the same names but other key material: their ids differ, so the lines are ignored, not failed.
    impostors = [tn.Signer.from_seed("witness.example.com/w1", SEEDS[0], 4).verifier,
                 tn.Signer.from_seed("example.com/behind-the-sofa", SEEDS[1]).verifier]
    with pytest.raises(UnverifiedNote):
        tn.open_note(SOFA_COSIGNED, impostors)
    # A cosignature over the example checkpoint, made here, verifies with both implementations.
    cosigner = tn.Signer.from_seed("witness.example.com/w1", SEEDS[2], tn.COSIGNATURE_V1)
    cosigned = SOFA_COSIGNED + cosigner.signature_line(SOFA_TEXT, timestamp).encode()
    assert tn.open_note(cosigned, [cosigner.verifier]).verified[0][1] == timestamp
    assert SPEC.open(cosigned, [("witness.example.com/w1", 4, public_of(SEEDS[2]))])[1] == [
        ("witness.example.com/w1", 4, timestamp)]


def test_witness_response_example():
    """tlog-witness.md's example response: three cosignature lines (two of w1, one of w2) that parse."""
    sigs = tn.parse_signature_lines(WITNESS_RESPONSE)
    assert [s.name for s in sigs] == ["witness.example/w1", "witness.example/w1", "witness.example/w2"]
    assert all(len(s.signature) == 72 for s in sigs)
    assert len({s.key_id for s in sigs}) == 3


def test_real_cosigned_checkpoint():
    """tlog-scales's arche2025h1 checkpoint: the log's Ed25519 signature and remora.n621.de's cosignature verify;
    the RFC 6962 signature under the log's name (another key id) and the other witnesses are ignored; a changed
    size fails both."""
    arche, remora = tn.parse_vkey(ARCHE_VKEY), tn.parse_vkey(REMORA_VKEY)
    note = tn.open_note(ARCHE_NOTE, [arche, remora])
    assert [(v.name, ts) for v, ts, _ in note.verified] == [(arche.name, 0), ("remora.n621.de", REMORA_TIME)]
    assert [s.name for s in note.unverified] == [arche.name, "transparency.dev/DEV:witness-little-garden",
                                                 "witness1.smartit.nu/witness1", "witness.stagemole.eu"]
    checkpoint = tcp.parse_checkpoint(note.text)
    assert (checkpoint.origin, checkpoint.size) == (arche.name, 1432088532)
    for verifier in (arche, remora):
        with pytest.raises(InvalidNoteSignature):
            tn.open_note(ARCHE_NOTE.replace(b"1432088532", b"42"), [verifier])
    assert SPEC.open(ARCHE_NOTE, [SPEC.parse_vkey(ARCHE_VKEY), SPEC.parse_vkey(REMORA_VKEY)])[1] == [
        (arche.name, 1, 0), ("remora.n621.de", 4, REMORA_TIME)]


# ---------------------------------------------------------------------------------------------------------------------
# Rules of the specifications the vectors do not exercise.

def test_non_canonical_base64_is_refused():
    """RFC 4648 base64 has no padding past the last quantum: Python's decoder accepts "AAAA=", Go's does not."""
    for bad in (GO_PETER_VKEY + "=", GO_PETER_VKEY + "==", GO_PETER_VKEY + "===="):
        with pytest.raises(NoteError):
            tn.parse_vkey(bad)
    for bad in (SPEC_FOO_NOTE.replace(b"aQM=\n", b"aQM==\n"), SPEC_FOO_NOTE.replace(b"aQM=\n", b"aQM=====\n")):
        with pytest.raises(NoteError):
            tn.open_note(bad, [tn.parse_vkey(SPEC_FOO_VKEY)])
    with pytest.raises(NoteError):
        tcp.parse_checkpoint(SOFA_TEXT.replace(b"q2I=\n", b"q2I==\n"))


def test_unknown_keys_sharing_a_name_or_an_id_are_ignored():
    """signed-note: "Verifiers MUST ignore signatures from unknown keys, even if they share a name or ID (but not
    both) with a known key"; a known key's failing signature rejects the note."""
    peter = tn.parse_vkey(GO_PETER_VKEY)
    same_id = GO_PETER_SIG.replace("PeterNeumann", "PeterNeumann2")
    other = tn.Signer.from_seed("PeterNeumann", SEEDS[0]).signature_line(GO_TEXT.encode())
    note = (GO_TEXT + "\n" + same_id + other + GO_PETER_SIG).encode()
    verified, unverified = opened(note, [peter])
    assert verified == [PETER] and [u[0] for u in unverified] == ["PeterNeumann2", "PeterNeumann"]
    forged = GO_PETER_SIG.replace("x08go/ZJ", "x08go/ZK")  # same name and id, other signature bytes
    with pytest.raises(InvalidNoteSignature):
        tn.open_note((GO_TEXT + "\n" + GO_PETER_SIG + forged).encode(), [peter])


def test_cosignature_timestamps():
    """tlog-cosignature: the timestamp MUST NOT exceed 2^63 - 1; it is decimal without leading zeroes in the
    message and big-endian in the signature."""
    cosigner = tn.Signer.from_seed("w.example", SEEDS[0], tn.COSIGNATURE_V1)
    assert tn.cosigned_message(b"t\n", 7) == b"cosignature/v1\ntime 7\nt\n"
    top = tn.sign_note(SOFA_TEXT, [cosigner], 2 ** 63 - 1)
    assert tn.open_note(top, [cosigner.verifier]).verified[0][1] == 2 ** 63 - 1
    for bad in (0, -1, 2 ** 63, None):
        with pytest.raises(NoteError):
            cosigner.signature(SOFA_TEXT, bad)
    # A signature carrying a time past 2^63 - 1 fails even when the Ed25519 signature is over that message.
    key = Ed25519PrivateKey.from_private_bytes(SEEDS[0])
    sig = struct.pack(">Q", 2 ** 63) + key.sign(b"cosignature/v1\ntime %d\n" % 2 ** 63 + SOFA_TEXT)
    assert cosigner.verifier.verify(SOFA_TEXT, sig) is None


# ---------------------------------------------------------------------------------------------------------------------
# Hypothesis: round trips with the second implementation, and parsers that only ever raise NoteError.

NAME_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters=[*WHITE_SPACE, "+"], min_codepoint=0x20)
names = st.text(NAME_CHARS, min_size=1, max_size=24)
TEXT_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters=[chr(c) for c in range(0x20) if c != 10])
texts = st.text(TEXT_CHARS, max_size=300).map(lambda t: (t + "\n").encode())
key_triples = st.lists(st.tuples(names, st.sampled_from([tn.ED25519, tn.COSIGNATURE_V1]),
                                 st.binary(min_size=32, max_size=32)), min_size=1, max_size=5,
                      unique=True)  # one line per key: open_note keeps one entry per key (as Go's note.Open)
timestamps = st.integers(1, 2 ** 63 - 1)


@settings(max_examples=150, deadline=None)
@given(key_triples, texts, timestamps)
def test_round_trips_with_the_specification_implementation(keys, text, timestamp):
    check_interop(SPEC, keys, text, timestamp)


@settings(max_examples=60, deadline=None)
@given(key_triples, texts, timestamps, st.data())
def test_changed_notes_never_verify_another_text(keys, text, timestamp, data):
    """Changing one byte of a signed note: the library refuses it with a NoteError, or opens the same text (a change
    in an ignored place); it agrees with the second implementation either way."""
    signers = [tn.Signer.from_seed(name, seed, t) for name, t, seed in keys]
    note = bytearray(tn.sign_note(text, signers, timestamp))
    i = data.draw(st.integers(0, len(note) - 1))
    note[i] = data.draw(st.integers(0, 255).filter(lambda b: b != note[i]))
    try:
        ours = tn.open_note(bytes(note), [s.verifier for s in signers])
    except NoteError:
        ours = None
    try:
        theirs = SPEC.open(bytes(note), [(name, t, public_of(seed)) for name, t, seed in keys])
    except SpecError:
        theirs = None
    assert (ours is None) == (theirs is None)
    if ours is not None:
        assert ours.text == text == theirs[0]
        assert [(v.name, v.sig_type, ts) for v, ts, _ in ours.verified] == theirs[1]


SOME_VERIFIERS = [tn.parse_vkey(GO_PETER_VKEY), tn.parse_vkey(REMORA_VKEY)]


def noise(seed: bytes):
    """Random bytes, and random bytes around the shapes the parsers look for."""
    return st.one_of(st.binary(max_size=400),
                     st.lists(st.sampled_from([b"\n", b"\n\n", "— ".encode(), b" ", b"+", b"=", b"PeterNeumann",
                                               b"x08go/ZJ", b"AAAA", b"\xff", b"\xe2\x80", b"0", b"PRIVATE+KEY+",
                                               GO_PETER_VKEY[len("PeterNeumann"):].encode(), seed]),
                              max_size=40).map(b"".join))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(noise(SPEC_FOO_NOTE), noise(ARCHE_NOTE[:200])))
def test_parsers_raise_only_note_errors(data):
    for parse in (tn.parse_note, tcp.parse_checkpoint, tn.parse_signature_lines,
                  lambda d: tn.open_note(d, SOME_VERIFIERS),
                  lambda d: tn.parse_vkey(d.decode("utf-8", "surrogateescape")),
                  lambda d: tn.parse_skey(d.decode("utf-8", "surrogateescape")),
                  lambda d: tn.parse_signature_line(d.decode("latin-1"))):
        try:
            parse(data)
        except NoteError:
            pass


def test_key_names_that_are_not_utf8_are_refused():
    """A name decoded with ``surrogateescape`` (as the policy parser decodes octets) may hold lone surrogates, which
    no UTF-8 note can carry: refused with a NoteError (it used to escape as a UnicodeEncodeError)."""
    for name in ("\udcff", "Peter\udc80Neumann"):
        with pytest.raises(NoteError):
            tn.parse_vkey(name + GO_PETER_VKEY[len("PeterNeumann"):])
        with pytest.raises(NoteError):
            tn.parse_skey("PRIVATE+KEY+" + name + GO_PETER_SKEY[len("PRIVATE+KEY+PeterNeumann"):])
        with pytest.raises(NoteError):
            tn.check_key_name(name)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=120) | st.lists(st.sampled_from(["\udcff", "\ud800", "a", " ", "+", "c74f20a3", "\u2014",
                                                         GO_PETER_VKEY[len("PeterNeumann+c74f20a3+"):]]),
                                        max_size=8).map("".join))
def test_key_parsers_raise_only_note_errors(text):
    for candidate in (text, GO_PETER_VKEY[:22] + text, "PRIVATE+KEY+" + text, text + "+c74f20a3+" + text):
        for parse in (tn.parse_vkey, tn.parse_skey):
            try:
                parse(candidate)
            except NoteError:
                pass
