"""The checkpoint log over HTTP as a C2SP tiled log (c2sp.org/tlog-tiles; docs/receipts.md#the-tiled-log), mounted
at ``/log/`` by ``ldpmarket.urls``; public, read-only, no session, no authentication.

* ``GET /log/checkpoint``: the latest checkpoint, a signed note with its witnesses' cosignatures
  (``accounts.ledger.notes.served_note``); 404 before the first.  Mutable: ``Cache-Control: no-cache``.
* ``GET /log/tile/<L>/<N>[.p/<W>]``: tile ``N`` of level ``L`` (``accounts.ledger.tiles``), 8,192 bytes when full,
  ``32 W`` when partial; ``<N>`` as ``x001/x234/067``.
* ``GET /log/tile/entries/<N>[.p/<W>]``: the data of leaves ``256 N .. 256 N + W - 1``, each after its length
  (big-endian uint16), gzip-compressed when the client accepts it.

Only what the latest signed checkpoint covers is served: a tile or bundle whose width exceeds what that tree has
at its place is a 404, as is any path that is not canonical (leading zeroes, a width of 0 or 256, a level above
63).  Tiles and bundles never change once served (full or partial): ``Cache-Control: public, max-age=31536000,
immutable``.
"""
from __future__ import annotations

import re

from django.http import HttpResponse
from django.urls import re_path
from django.views.decorators.gzip import gzip_page
from django.views.decorators.http import require_safe

from accounts.ledger import notes, tiles

IMMUTABLE = "public, max-age=31536000, immutable"
#: ``<N>``: 3-digit elements, all but the last after an ``x`` (ASCII digits only: ``\d`` would take any digit).
INDEX = r"(?P<index>(?:x[0-9]{3}/)*[0-9]{3})"
PARTIAL = r"(?:\.p/(?P<width>[0-9]+))?"
#: Indexes are int64 (as in the reference implementation); longer paths name nothing.
MAX_INDEX = 2 ** 63 - 1


def _not_found(why: str) -> HttpResponse:
    response = HttpResponse(f"{why}\n", status=404, content_type="text/plain; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    return response


def _decimal(text: str, lo: int, hi: int) -> int | None:
    """``text`` as an integer in ``lo .. hi`` written without leading zeroes, else ``None``."""
    if not re.fullmatch(r"0|[1-9][0-9]{0,3}", text) or not lo <= int(text) <= hi:
        return None
    return int(text)


def _index(text: str) -> int | None:
    """The index ``<N>`` encodes, if it is its canonical encoding (no leading ``x000`` element) and in range."""
    parts = text.split("/")
    if len(parts) > 7 or (len(parts) > 1 and parts[0] == "x000"):
        return None
    n = int("".join(p.lstrip("x") for p in parts))
    return n if n <= MAX_INDEX else None


def _place(index: str, width: str | None) -> tuple[int, int] | None:
    n = _index(index)
    w = tiles.WIDTH if width is None else _decimal(width, 1, tiles.WIDTH - 1)
    return None if n is None or w is None else (n, w)


def _octets(data: bytes) -> HttpResponse:
    response = HttpResponse(data, content_type="application/octet-stream")
    response["Cache-Control"] = IMMUTABLE
    return response


@require_safe
def checkpoint(request):
    note = notes.served_note()
    if note is None:
        return _not_found("no checkpoint yet")
    response = HttpResponse(note, content_type="text/plain; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    return response


@require_safe
def tile(request, level: str, index: str, width: str | None = None):
    lvl, place = _decimal(level, 0, tiles.MAX_LEVEL), _place(index, width)
    if lvl is None or place is None:
        return _not_found("not a tile path (c2sp.org/tlog-tiles)")
    data = tiles.served_tile(lvl, *place, notes.latest_size())
    if data is None:
        return _not_found("the latest checkpoint does not cover this tile")
    return _octets(data)


@require_safe
@gzip_page
def entries(request, index: str, width: str | None = None):
    place = _place(index, width)
    if place is None:
        return _not_found("not an entry bundle path (c2sp.org/tlog-tiles)")
    data = tiles.served_entries(*place, notes.latest_size())
    if data is None:
        return _not_found("the latest checkpoint does not cover these entries")
    return _octets(data)


#: Routes, mounted under /log/ by ``ldpmarket.urls`` (the tiled log's prefix; its origin is ``LDP_LOG_ORIGIN``).
urlpatterns = [
    re_path(r"^checkpoint\Z", checkpoint, name="log-checkpoint"),
    re_path(rf"^tile/entries/{INDEX}{PARTIAL}\Z", entries, name="log-entries"),
    re_path(rf"^tile/(?P<level>[0-9]+)/{INDEX}{PARTIAL}\Z", tile, name="log-tile"),
]
