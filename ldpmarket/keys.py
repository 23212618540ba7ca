"""Start-up checks of the three secret keys when ``DJANGO_DEBUG`` is off (docs/security.md, "Keys").

Imported by the settings, before Django is set up: plain Python only.  A key is refused when it is shorter
than its minimum, has fewer than ``MIN_DISTINCT`` different characters (``aaaa...``, ``abab...``), is or
contains a known placeholder or development default, or is the same as another of the three keys.  The
error names the setting and the rule, never the key.
"""
from __future__ import annotations

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

#: Minimum lengths: Django's own deploy check wants 50 characters for SECRET_KEY; the two keys the service
#: derives its encryption and pseudonym keys from need 32 (``secrets.token_urlsafe(32)`` gives 43).
MIN_LENGTH = {"DJANGO_SECRET_KEY": 50, "DJANGO_SECRET_KEY_FALLBACKS": 50, "LDP_VALUE_KEY": 32, "LDP_VALUE_KEYS": 32,
              "LDP_PSEUDONYM_KEY": 32, "LDP_LEDGER_SIGNING_KEYS": 32,
              "LDP_LEDGER_BLINDING_KEY": 32, "LDP_METRICS_TOKEN": 32}
MIN_DISTINCT = 12
#: Lower-cased fragments of placeholders and development defaults (.env.example, settings, Django's template).
PLACEHOLDERS = ("replace-me", "replace_me", "changeme", "change-me", "insecure", "development-", "not-for-production",
                "example", "secret-key", "password")
HOW = "generate one with: python3 -c 'import secrets; print(secrets.token_urlsafe(50))' (docs/security.md, Keys)"


def weakness(name: str, value: str) -> str | None:
    """Why ``value`` is too weak for the setting ``name`` (``LDP_LEDGER_SIGNING_KEYS[i]``: one of a list), or None."""
    minimum = MIN_LENGTH[name.partition("[")[0]]
    if len(value) < minimum:
        return f"it has {len(value)} characters; it needs at least {minimum}"
    if len(set(value)) < MIN_DISTINCT:
        return f"it has only {len(set(value))} different characters; it needs at least {MIN_DISTINCT}"
    lowered = value.lower()
    for fragment in PLACEHOLDERS:
        if fragment in lowered:
            return f"it contains {fragment!r}, as placeholders and development keys do"
    return None


def require_strong_keys(keys: dict[str, str], may_share: frozenset[str] = frozenset()) -> None:
    """Raise ``ImproperlyConfigured`` naming the first weak or repeated key of ``keys`` (name -> value).  The keys
    named in ``may_share`` may hold the same string as one another (the ledger's keys kept at the value key they
    were derived from during and after a value-key rotation: docs/security.md#rotating-the-value-key)."""
    for name, value in keys.items():
        why = weakness(name, value or "")
        if why:
            raise ImproperlyConfigured(f"{name} is too weak for production (DJANGO_DEBUG=0): {why}; {HOW}.")
    seen: dict[str, str] = {}
    for name, value in keys.items():
        if value in seen and not (name in may_share and seen[value] in may_share):
            raise ImproperlyConfigured(f"{name} is the same as {seen[value]}: each key must be its own random "
                                       f"string; {HOW}.")
        seen[value] = name


# ------------------------------------------------------------------------------------------- value-key ids

#: The label under which a value key's public id is derived (its own HKDF output: it reveals nothing of the keys
#: that seal, which are derived under other labels, market/values/sealing.py).
VALUE_KEY_ID_LABEL = b"ldpmarket value key id v1"


def value_key_id(secret: str) -> int:
    """The public id of a value key (docs/security.md#keys): the first 4 bytes, as a signed big-endian int32 (the
    ``value_key_id`` column of every sealed row), of HKDF-SHA256 of the key under ``VALUE_KEY_ID_LABEL``."""
    digest = HKDF(algorithm=hashes.SHA256(), length=4, salt=None, info=VALUE_KEY_ID_LABEL).derive(secret.encode())
    return int.from_bytes(digest, "big", signed=True)


def newest_value_key_id() -> int:
    """The id of the key new seals use, the first of ``settings.LDP_VALUE_KEYS`` (the default of every sealed row's
    ``value_key_id``: what the ORM writes is sealed by ``market.values.sealing``, with that key)."""
    return value_key_id(settings.LDP_VALUE_KEYS[0])
