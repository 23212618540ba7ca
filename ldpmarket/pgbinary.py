"""PostgreSQL binary ``COPY`` built from and parsed into numpy arrays, with no Python loop per row.

A binary COPY row is ``int16 field count`` then, per field, ``int32 length`` and
the field's bytes (big-endian), or length -1 for NULL.  When every field of a
group of rows has one width, the group is one numpy structured array: that is
how ``binary_rows`` writes and ``parse_rows`` reads.  ``copy_columns`` handles
columns whose width varies (NULLs, texts) by writing one such group per
distinct combination of widths.

Encodings (PostgreSQL's ``*_send``/``*_recv``):

- ``bigint``/``integer``/``boolean``: the big-endian integer, 1 byte for booleans;
- ``bytea``: the bytes as they are;
- ``numeric``: ``ndigits, weight, sign, dscale`` (int16 each) then base-10000
  digits (int16), most significant first; leading and trailing zero digits are
  accepted and stripped by the server, so every value of a column can be
  written with the same number of digits (``numeric_fixed``);
- ``timestamptz``: int64 microseconds since 2000-01-01 UTC;
- ``text``: its UTF-8 bytes;
- ``bigint[]``: ``ndim, has-null flag, element type oid`` (int32 each), per dimension ``length, lower bound``
  (int32), then per element ``int32 length (8)`` and the big-endian int64.
"""
from __future__ import annotations

import json
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import numpy as np

from .problems import CopyFormatError

#: PGCOPY binary format: signature, flags, header extension length; the trailer is a field count of -1.
SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
HEADER = SIGNATURE + struct.pack(">ii", 0, 0)
TRAILER = struct.pack(">h", -1)
PG_EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)
NUMERIC_NEG = 0x4000
INT8_OID = 20


# --------------------------------------------------------------------------- fixed-width rows

def _field(col: np.ndarray):
    return col.dtype if col.ndim == 1 else (col.dtype, col.shape[1:])


def binary_rows(columns: Sequence[np.ndarray]) -> bytes:
    """The body (no header, no trailer) of a binary COPY of ``n`` rows, built without a Python loop per row.

    A 1-D ``(n,)`` column is a scalar field (an integer or float column; written
    big-endian, PostgreSQL's order, whatever the array's byte order); an
    ``(n, ...)`` column is a field whose value is the row's bytes as they are
    (e.g. ``<i8`` micro-epsilons in a ``bytea``, or a pre-encoded ``numeric``).  No NULLs.
    """
    columns = [np.asarray(c) for c in columns]
    columns = [c.astype(c.dtype.newbyteorder(">")) if c.ndim == 1 else c for c in columns]
    n = len(columns[0])
    if any(len(c) != n for c in columns):
        raise ValueError("all columns must have the same number of rows")
    fields = [("nfields", ">i2")]
    for j, col in enumerate(columns):
        fields += [(f"len{j}", ">i4"), (f"f{j}", _field(col))]
    rec = np.empty(n, dtype=fields)
    rec["nfields"] = len(columns)
    for j, col in enumerate(columns):
        rec[f"len{j}"] = col.dtype.itemsize * math.prod(col.shape[1:])
        rec[f"f{j}"] = col
    return rec.tobytes()


def copy_in(cursor, table_and_columns: str, bodies: Sequence[bytes]) -> None:
    """``COPY <table_and_columns> FROM STDIN (FORMAT BINARY)`` of the given row bodies (``binary_rows``)."""
    with cursor.copy(f"COPY {table_and_columns} FROM STDIN (FORMAT BINARY)") as copy:
        copy.write(HEADER)
        for body in bodies:
            copy.write(body)
        copy.write(TRAILER)


def parse_rows(data: bytes, layout: Sequence[tuple[str, object]]) -> np.ndarray:
    """Parse a binary COPY TO stream whose fields all have fixed widths; returns a structured array.

    ``layout`` is ``[(name, dtype or (dtype, shape)), ...]`` in column order.
    Raises ``CopyFormatError`` when a row has another field count or field
    length (e.g. a NULL or a blob of an unexpected size).
    """
    mv = memoryview(data)
    if len(mv) < len(HEADER) + len(TRAILER) or bytes(mv[:len(SIGNATURE)]) != SIGNATURE:
        raise CopyFormatError("not a binary COPY stream")
    ext = struct.unpack_from(">i", mv, len(SIGNATURE) + 4)[0]
    start = len(HEADER) + ext
    if bytes(mv[-2:]) != TRAILER:
        raise CopyFormatError("binary COPY stream without trailer")
    fields = [("nfields", ">i2")]
    for name, dt in layout:
        fields += [(f"len_{name}", ">i4"), (name, dt)]
    dtype = np.dtype(fields)
    body = mv[start:len(mv) - 2]
    if len(body) % dtype.itemsize:
        raise CopyFormatError(f"binary COPY body of {len(body)} bytes is not a whole number of "
                              f"{dtype.itemsize}-byte rows")
    rows = np.frombuffer(body, dtype=dtype)
    if rows.size:
        if (rows["nfields"] != len(layout)).any():
            raise CopyFormatError("a row has an unexpected number of fields")
        for name, _ in layout:
            if (rows[f"len_{name}"] != dtype.fields[name][0].itemsize).any():
                raise CopyFormatError(f"a row has a NULL or an unexpected length in field {name!r}")
    return rows


def copy_out(cursor, query: str, params=None) -> bytes:
    """``COPY (query) TO STDOUT (FORMAT BINARY)``, all of it, as bytes."""
    data = bytearray()
    with cursor.copy(f"COPY ({query}) TO STDOUT (FORMAT BINARY)", params) as copy:
        while chunk := copy.read():
            data += chunk
    return bytes(data)


# --------------------------------------------------------------------------- encoders

def numeric_fixed(units: np.ndarray, scale: int, *, int_digits: int | None = None) -> np.ndarray:
    """Binary ``numeric`` of the exact decimals ``units / 10**scale``, all of one width: ``(n, w)`` uint8.

    The fraction takes ``ceil(scale / 4)`` base-10000 digits (padded with
    zeros on the right), the integer part ``int_digits`` (default: enough for
    the largest magnitude; leading zero digits are allowed).  Negative values
    get the sign ``0x4000`` and their magnitude's digits.
    """
    units = np.asarray(units, dtype=np.int64).reshape(-1)
    frac_digits = -(-scale // 4)
    mag = np.abs(units)
    whole, frac = np.divmod(mag, 10 ** scale)
    frac = frac * 10 ** (4 * frac_digits - scale)
    if int_digits is None:
        top = int(whole.max()) if whole.size else 0
        int_digits = max(1, -(-len(str(top)) // 4))
    if whole.size and int(whole.max()) >= 10_000 ** int_digits:
        raise ValueError("value too large for the requested number of integer digits")
    ndigits = int_digits + frac_digits
    words = np.empty((units.size, 4 + ndigits), dtype=">i2")
    words[:, 0] = ndigits
    words[:, 1] = int_digits - 1  # weight of the first digit
    words[:, 2] = np.where(units < 0, NUMERIC_NEG, 0).astype(np.int64).astype(">u2").view(">i2")
    words[:, 3] = scale
    for j in range(int_digits):  # most significant first
        words[:, 4 + j] = whole // 10_000 ** (int_digits - 1 - j) % 10_000
    for j in range(frac_digits):
        words[:, 4 + int_digits + j] = frac // 10_000 ** (frac_digits - 1 - j) % 10_000
    return words.view(np.uint8).reshape(units.size, 2 * (4 + ndigits))


def int8_arrays(matrix: np.ndarray) -> np.ndarray:
    """Binary ``bigint[]`` of each row of an ``(n, k)`` integer matrix (one array of ``k`` elements per row, no
    NULLs): ``(n, 20 + 12 k)`` uint8, built in one numpy pass."""
    matrix = np.asarray(matrix, dtype=np.int64)
    n, k = matrix.shape
    rec = np.empty(n, dtype=[("ndim", ">i4"), ("flags", ">i4"), ("oid", ">i4"), ("dim", ">i4"), ("lbound", ">i4"),
                             ("elements", [("len", ">i4"), ("value", ">i8")], (k,))])
    rec["ndim"], rec["flags"], rec["oid"], rec["dim"], rec["lbound"] = 1, 0, INT8_OID, k, 1
    rec["elements"]["len"] = 8
    rec["elements"]["value"] = matrix
    return rec.view(np.uint8).reshape(n, rec.dtype.itemsize)


def timestamp_micros(dt: datetime) -> int:
    """A ``timestamptz`` in binary COPY's unit: microseconds since 2000-01-01 UTC."""
    delta = dt - PG_EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


# --------------------------------------------------------------------------- columns of mixed widths

@dataclass
class Column:
    """One column of a ``copy_columns`` write.

    ``data`` is ``(n,)`` integers (``int8``/``int4``/``bool`` fields, or codes
    into ``choices`` for a text column), or ``(n, w)`` uint8 pre-encoded field
    bytes (``bytea``, ``numeric_fixed``); ``null`` marks NULLs.
    """

    data: np.ndarray
    null: np.ndarray | None = None
    choices: Sequence[str] | None = None  # a text column: data holds indices into choices
    #: What ``values`` decodes: "numeric" (from ``units`` / 10**``scale``), "timestamp", or None (integers,
    #: texts by their choices, bytes as they are).  Binary COPY reads only ``data``.
    kind: str | None = None
    units: np.ndarray | None = None
    scale: int = 0

    @classmethod
    def int8(cls, values, null=None) -> "Column":
        return cls(np.asarray(values, dtype=">i8"), null)

    @classmethod
    def int4(cls, values, null=None) -> "Column":
        return cls(np.asarray(values, dtype=">i4"), null)

    @classmethod
    def numeric(cls, units, scale: int, null=None) -> "Column":
        units = np.where(null, 0, units) if null is not None else units
        return cls(numeric_fixed(units, scale), null, kind="numeric", units=units, scale=scale)

    @classmethod
    def timestamp(cls, micros_since_unix, null=None) -> "Column":
        """From int64 microseconds since 1970 (as ``accounts.ledger.hashchain.micros``)."""
        shift = timestamp_micros(datetime(1970, 1, 1, tzinfo=timezone.utc))
        return cls((np.asarray(micros_since_unix, dtype=np.int64) + shift).astype(">i8"), null, kind="timestamp")

    @classmethod
    def text(cls, codes, choices: Sequence[str], null=None) -> "Column":
        return cls(np.asarray(codes, dtype=np.int64), null, list(choices))

    @classmethod
    def int8_array(cls, matrix, null=None) -> "Column":
        """A ``bigint[]`` column (``ldpmarket.fields.Int64ArrayField``): row i holds ``matrix[i]`` (every row
        the same length); SQLite gets the JSON text of each list."""
        matrix = np.asarray(matrix, dtype=np.int64)
        return cls(int8_arrays(matrix), null, kind="int8_array", units=matrix)

    def values(self) -> list:
        """The column as Python values, None for NULLs: ``int``, ``Decimal`` with ``scale`` places, aware UTC
        ``datetime``, ``str`` or ``bytes`` -- what an ``executemany`` binds where binary COPY is not available
        (``ldpmarket.storage.write_columns`` on SQLite).  Each distinct value is converted once."""
        if self.kind == "int8_array":
            out = [json.dumps(row, separators=(",", ":")) for row in np.asarray(self.units).tolist()]
        elif self.data.ndim > 1 and self.kind != "numeric":
            out = [bytes(row) for row in np.ascontiguousarray(self.data)]
        else:
            if self.kind == "numeric":
                raw, quantum = np.asarray(self.units, dtype=np.int64).reshape(-1), Decimal(1).scaleb(-self.scale)
                convert = lambda v: (Decimal(v) / 10 ** self.scale).quantize(quantum)  # noqa: E731
            elif self.kind == "timestamp":
                raw = self.data.astype(np.int64)
                convert = lambda v: PG_EPOCH + timedelta(microseconds=v)  # noqa: E731
            elif self.choices is not None:
                raw, convert = self.data.astype(np.int64), self.choices.__getitem__
            else:
                raw, convert = self.data.astype(np.int64), None
            if convert is None:
                out = raw.tolist()
            else:
                distinct, inverse = np.unique(raw, return_inverse=True)
                table = [convert(v) for v in distinct.tolist()]
                out = [table[i] for i in inverse.reshape(-1).tolist()]
        if self.null is not None:
            out = [None if n else v for v, n in zip(out, np.asarray(self.null, dtype=bool).tolist())]
        return out


def copy_columns(cursor, table: str, columns: dict[str, Column], n: int) -> None:
    """``COPY table (columns) FROM STDIN (FORMAT BINARY)`` of ``n`` rows given as columns.

    Rows are grouped by their combination of NULLs and text choices; each
    group has fixed widths and is written as one structured array, so the
    work is one numpy pass per group (a handful), never a loop per row.
    Row order within the COPY follows the groups (callers must not rely on it).
    """
    if n == 0:
        return
    names = list(columns)
    cols = [columns[c] for c in names]
    # A group key per row: each nullable column's null flag and each text column's choice.
    keys = np.zeros(n, dtype=np.int64)
    for col in cols:
        if col.choices is not None:
            code = np.asarray(col.data, dtype=np.int64)
            if col.null is not None:
                code = np.where(col.null, len(col.choices), code)
            keys = keys * (len(col.choices) + 1) + code
        elif col.null is not None:
            keys = keys * 2 + np.asarray(col.null, dtype=np.int64)
    groups, inverse = np.unique(keys, return_inverse=True)
    bodies = []
    for g in range(groups.size):
        rows = np.flatnonzero(inverse == g)
        first = int(rows[0])
        fields = [("nfields", ">i2")]
        values = []
        for j, col in enumerate(cols):
            is_null = col.null is not None and bool(col.null[first])
            if is_null:
                fields.append((f"len{j}", ">i4"))
                values.append((f"len{j}", -1, None))
                continue
            if col.choices is not None:
                raw = col.choices[int(col.data[first])].encode()
                data = np.broadcast_to(np.frombuffer(raw, dtype=np.uint8), (rows.size, len(raw)))
            else:
                data = col.data[rows]
            width = data.dtype.itemsize * math.prod(data.shape[1:])
            fields += [(f"len{j}", ">i4"), (f"f{j}", _field(data))]
            values.append((f"len{j}", width, (f"f{j}", data)))
        rec = np.empty(rows.size, dtype=fields)
        rec["nfields"] = len(cols)
        for len_name, width, payload in values:
            rec[len_name] = width
            if payload is not None:
                rec[payload[0]] = payload[1]
        bodies.append(rec.tobytes())
    copy_in(cursor, f"{table} ({', '.join(names)})", bodies)
