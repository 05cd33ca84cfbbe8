"""Stored secrets: passwords as scrypt hashes, tokens as SHA-256 hashes. Pure (hashlib, hmac, secrets).

A password is low-entropy, so it is stored salted and slow (``scrypt$<n>$<r>$<p>$<salt hex>$<hash hex>``); a
token is generated with 32 random bytes, so a fast hash is enough (``sha256$<hex>``) and a token can be checked on
every request. ``cuvee auth hash-password`` and ``cuvee auth new-token`` print what a config file takes.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 2**14, 8, 1
_MAX_SECRET = 1024  # a password or token longer than this is refused before any hashing


class SecretFormatError(ValueError):
    """A stored hash that is not one this module writes."""


def hash_password(password: str, *, n: int = _SCRYPT_N, r: int = _SCRYPT_R, p: int = _SCRYPT_P) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, dklen=32)
    return f"scrypt${n}${r}${p}${salt.hex()}${digest.hex()}"


def new_token() -> tuple[str, str]:
    """(the token to hand out, its stored hash)."""
    token = secrets.token_urlsafe(32)
    return token, hash_token(token)


def hash_token(token: str) -> str:
    return "sha256$" + hashlib.sha256(token.encode()).hexdigest()


def check_format(stored: str, kind: str) -> None:
    """Raises SecretFormatError unless ``stored`` is the hash this module writes for ``kind`` (``password``:
    scrypt; ``token``: sha256) (config validation)."""
    parts = stored.split("$")
    if kind == "password" and parts[0] != "scrypt":
        raise SecretFormatError("a password is stored as 'scrypt$...' (cuvee auth hash-password)")
    if kind == "token" and parts[0] != "sha256":
        raise SecretFormatError("a token is stored as 'sha256$...' (cuvee auth new-token)")
    if parts[0] == "scrypt" and len(parts) == 6 and all(x.isdigit() for x in parts[1:4]):
        try:
            bytes.fromhex(parts[4]), bytes.fromhex(parts[5])
        except ValueError:
            raise SecretFormatError("a scrypt hash holds hex salt and digest") from None
        return
    if parts[0] == "sha256" and len(parts) == 2 and len(parts[1]) == 64:
        return
    raise SecretFormatError("expected 'scrypt$...' (cuvee auth hash-password) or 'sha256$...' (cuvee auth new-token)")


def verify(secret: str, stored: str) -> bool:
    """Whether ``secret`` is the password or token whose hash is ``stored`` (constant time in the digest)."""
    if len(secret) > _MAX_SECRET:
        return False
    parts = stored.split("$")
    if parts[0] == "sha256" and len(parts) == 2:
        return hmac.compare_digest(hash_token(secret).encode(), stored.encode())
    if parts[0] == "scrypt" and len(parts) == 6:
        n, r, p = (int(x) for x in parts[1:4])
        digest = hashlib.scrypt(secret.encode(), salt=bytes.fromhex(parts[4]), n=n, r=r, p=p, dklen=32)
        return hmac.compare_digest(digest.hex().encode(), parts[5].encode())
    return False
