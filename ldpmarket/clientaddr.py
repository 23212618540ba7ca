"""The client's address: ``REMOTE_ADDR``, unless the request came through a trusted proxy (docs/security.md).

``X-Forwarded-For`` is written by whoever sends the request, so it counts only when ``REMOTE_ADDR`` is one
of ``LDP_TRUSTED_PROXIES`` (addresses or networks).  Then the header is read from the right: each hop a
trusted proxy added is skipped, and the first address that is not a trusted proxy is the client.  Entries to
its left were written by the client itself and are ignored, so rotating them changes nothing; an entry that
is not an IP address stops the walk at the last address known good.

:class:`ClientAddressMiddleware` puts the result in ``REMOTE_ADDR`` (the peer's own address stays in
``LDP_PEER_ADDR``), so that everything keyed by address agrees on it: the sign-in lockout
(django-axes), the API's rate limits (REST framework with ``NUM_PROXIES = 0``) and the logs.
"""
from __future__ import annotations

import ipaddress
from functools import lru_cache
from typing import Iterable, Mapping

from django.conf import settings

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@lru_cache(maxsize=16)
def parse_networks(entries: tuple[str, ...]) -> tuple[Network, ...]:
    """``("10.0.0.0/8", "192.0.2.1", "2001:db8::/32")`` -> networks; ``ValueError`` names a bad entry."""
    networks = []
    for entry in entries:
        entry = entry.strip()
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(f"LDP_TRUSTED_PROXIES: {entry!r} is not an IP address or network") from None
    return tuple(networks)


def _ip(text: str):
    try:
        return ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None


def _trusted(ip, networks: Iterable[Network]) -> bool:
    if ip is None:
        return False
    if getattr(ip, "ipv4_mapped", None):
        ip = ip.ipv4_mapped
    return any(ip.version == net.version and ip in net for net in networks)


def resolve(peer: str, forwarded_for: str | None, trusted: Iterable[str]) -> str:
    """The client's address, given the peer's address, the ``X-Forwarded-For`` header and the trusted proxies."""
    networks = parse_networks(tuple(trusted))
    current = _ip(peer or "")
    if not networks or not _trusted(current, networks):
        return peer or ""
    for hop in reversed([hop for hop in (forwarded_for or "").split(",") if hop.strip()]):
        ip = _ip(hop)
        if ip is None:
            break
        current = ip
        if not _trusted(ip, networks):
            break
    return str(current)


def client_address(meta: Mapping[str, str], trusted: Iterable[str]) -> str:
    """The client's address for a request's ``META``, given the trusted proxies (addresses or networks)."""
    return resolve(meta.get("REMOTE_ADDR", ""), meta.get("HTTP_X_FORWARDED_FOR"), trusted)


class ClientAddressMiddleware:
    """First in ``MIDDLEWARE``: ``REMOTE_ADDR`` becomes the client's address (see the module's docstring)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        meta = request.META
        peer = meta.setdefault("LDP_PEER_ADDR", meta.get("REMOTE_ADDR", ""))
        meta["REMOTE_ADDR"] = resolve(peer, meta.get("HTTP_X_FORWARDED_FOR"), settings.LDP_TRUSTED_PROXIES)
        return self.get_response(request)


def request_address(request) -> str:
    """``AXES_CLIENT_IP_CALLABLE``: the address the middleware settled on (``REMOTE_ADDR``)."""
    return request.META.get("REMOTE_ADDR", "")
