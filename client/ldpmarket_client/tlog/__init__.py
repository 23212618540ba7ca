"""The transparency-log formats of C2SP that ldpmarket's ledger speaks (docs/receipts.md#checkpoints-as-signed-notes):
signed notes and verifier keys (``note``), checkpoints and cosignatures (``checkpoint``), trust policies
(``policy``), offline proofs (``proof``), RFC 6962 Merkle proofs (``merkle``) and tiled logs (``tiles``).

Pure Python and ``cryptography``; nothing here imports the service.  The service signs its checkpoints with these
modules, and the witness, the monitor and ``ldpmarket-client verify`` check them with the same code; an
independent implementation written from the specifications in the tests (tests/client/test_tlog_conformance.py)
and Go's ``golang.org/x/mod/sumdb/note`` test vectors keep it honest.
"""
