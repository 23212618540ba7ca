"""Node's unit tests of the portal's pure JavaScript modules (``node --test tests/js/*.test.mjs``) and the generator
of the receipts vectors they read (``make_receipt_vectors.py``)."""
