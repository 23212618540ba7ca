"""Randomness for privacy: a cryptographically secure source by default.

Every privacy-relevant draw in ``mechanisms`` consumes uniform 64-bit words
``u`` and compares them with integer thresholds, so sampling never depends on
float rounding of ``u``; how the thresholds are chosen so that no sampler
realises more than the epsilon charged is in docs/mechanisms.md ("Exact
sampling").

Sources:

* ``None`` (the default) -> :func:`default_source`, a :class:`SecureRandom`:
  a ChaCha20 keystream keyed from the operating system's CSPRNG
  (``os.urandom``), re-keyed every 2**30 bytes and after ``fork()`` (so
  Celery's forked workers never share a stream).  docs/quality-targets.md#reliability allows "the
  OS CSPRNG ... or a stream cipher keyed from it"; ChaCha20 is the cipher the
  Linux kernel itself uses behind ``getrandom``.
* :class:`OSRandom`: every word straight from ``os.urandom`` (slower; kept as
  the reference "raw CSPRNG" and for callers who want no user-space state).
* a ``numpy.random.Generator``, only when the caller passes one explicitly
  (tests and reproducible simulations).
"""
from __future__ import annotations

import os
import threading

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

TWO_64 = 1 << 64
U64_MAX = TWO_64 - 1


class OSRandom:
    """Uniform 64-bit words read directly from ``os.urandom``."""

    def words(self, n: int) -> np.ndarray:
        return np.frombuffer(os.urandom(8 * n), dtype=np.uint64)


class SecureRandom:
    """ChaCha20 keystream keyed from ``os.urandom``; thread- and fork-safe.

    The 256-bit key and 128-bit initial block counter/nonce come from the OS.
    After ``REKEY_BYTES`` bytes (far below the 2**32-block counter limit) or
    in a child process after ``fork()``, a fresh key is drawn.
    """

    REKEY_BYTES = 1 << 30

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rekey()

    def _rekey(self) -> None:
        cipher = Cipher(algorithms.ChaCha20(os.urandom(32), os.urandom(16)), mode=None)
        self._encryptor = cipher.encryptor()
        self._used = 0
        self._pid = os.getpid()

    def words(self, n: int) -> np.ndarray:
        nbytes = 8 * n
        out = bytearray(nbytes)
        with self._lock:
            if self._pid != os.getpid() or self._used + nbytes > self.REKEY_BYTES:
                self._rekey()
            self._used += nbytes
            # Encrypting zeros yields the raw keystream.
            self._encryptor.update_into(bytes(nbytes), out)
        return np.frombuffer(out, dtype=np.uint64)


_default = SecureRandom()


def _reseed_after_fork() -> None:  # pragma: no cover - exercised in a forked child
    global _default
    _default = SecureRandom()


os.register_at_fork(after_in_child=_reseed_after_fork)


def default_source() -> SecureRandom:
    """The process-wide secure source used when ``rng`` is ``None``."""
    return _default


def words(rng, n: int) -> np.ndarray:
    """``n`` independent uniform words in [0, 2**64) from ``rng`` (see module doc)."""
    if rng is None:
        return _default.words(n)
    if isinstance(rng, np.random.Generator):
        return rng.integers(0, U64_MAX, size=n, dtype=np.uint64, endpoint=True)
    if hasattr(rng, "words"):
        return rng.words(n)
    raise ValueError(
        "rng must be None (secure default), a numpy.random.Generator or a source with "
        f"a words(n) method, got {type(rng).__name__}"
    )


def threshold(p: float) -> int:
    """``floor(p * 2**64)`` as an exact Python integer, for ``p`` in [0, 1].

    Multiplying a double by a power of two is exact, so the only rounding is
    the floor; an event with threshold ``T`` has probability exactly ``T / 2**64``.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"probability must lie in [0, 1], got {p!r}")
    return int(float(p) * TWO_64)


def threshold_up(p: float) -> int:
    """``ceil(p * 2**64)`` as an exact Python integer, for ``p`` in [0, 1]: a small cell rounded up."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"probability must lie in [0, 1], got {p!r}")
    x = float(p) * TWO_64
    return int(x) + (int(x) != x)


def uniform_below(rng, k, n: int) -> np.ndarray:
    """``n`` integers uniform in 0..k-1 (``k`` scalar or per-row array, all >= 1).

    Uses ``u // floor(2**64 / k)`` with rejection of the top partial block, so
    every integer has probability exactly 1/k.
    """
    k_arr = np.broadcast_to(np.asarray(k, dtype=np.uint64), (n,))
    block = np.uint64(U64_MAX) // k_arr  # floor((2**64 - 1) / k)
    out = np.empty(n, dtype=np.int64)
    todo = np.arange(n)
    while todo.size:
        u = words(rng, todo.size)
        q = u // block[todo]
        ok = q < k_arr[todo]
        out[todo[ok]] = q[ok]
        todo = todo[~ok]
    return out
