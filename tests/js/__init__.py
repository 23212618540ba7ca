"""Node's unit tests of the portal's pure JavaScript modules (``node --test tests/js/*.test.mjs``) and the generators
of the vectors they read (``make_receipt_vectors.py``: receipts files; ``make_tlog_vectors.py``: C2SP signed notes,
checkpoints and trust policies)."""
