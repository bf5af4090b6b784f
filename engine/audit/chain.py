"""Hashes, MACs and keys: the primitives that make the log tamper-evident.

A record's ``hash`` is sha256 over its line as written, without the final
``,"hash":"..."`` (``hash`` is always the last field); its ``prev`` is the
hash of the record before it in the same stream (64 zeros for
the very first one). A checkpoint's ``mac`` is HMAC-SHA256 with the operator
key over the checkpoint's canonical JSON without ``mac`` and ``hash``: since
that body holds ``prev``, one valid MAC vouches for the whole chain before it.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from pathlib import Path
from typing import Any, Mapping

from innerguard.engine.errors import InnerguardError

GENESIS = "0" * 64
KEY_ENV = "INNERGUARD_AUDIT_KEY"


_canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str, allow_nan=False).encode
# Lines are written in insertion order: the hash covers the bytes as written,
# so nothing needs re-serialising to verify (and sorting would cost 20 %).
# ASCII only: text with any code point (lone surrogates included) round-trips.
_line = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, default=str, allow_nan=False).encode
HASH_SUFFIX = re.compile(rb',"hash":"([0-9a-f]{64})"\}\n?$')


def canonical(record: Mapping[str, Any]) -> str:
    """Sorted keys, no spaces: what a checkpoint's MAC covers."""
    return _canonical(record)


def digest(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()


def digest_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def seal_line(record: dict[str, Any]) -> tuple[str, str]:
    """(hash, line) for a record whose ``prev`` is set. The hash is sha256 over
    the line's bytes up to its closing brace, with ``hash`` left out: the
    line is ``<body without its closing "}">,"hash":"<hash>"}``."""
    body = _line(record)
    h = hashlib.sha256(body.encode("ascii")).hexdigest()
    return h, body[:-1] + f',"hash":"{h}"}}\n'


def fields(record: Mapping[str, Any]) -> str:
    """A record's fields as JSON without the braces: for ``seal_parts``."""
    return _line(record)[1:-1]


def seal_parts(shared: str, own: dict[str, Any]) -> tuple[str, str]:
    """``seal_line`` of a record made of ``shared`` (from ``fields``, serialised
    once for several records) followed by ``own`` (which holds ``prev``)."""
    body = "{" + shared + "," + _line(own)[1:]
    h = hashlib.sha256(body.encode("ascii")).hexdigest()
    return h, body[:-1] + f',"hash":"{h}"}}\n'


def line_hash(raw: bytes) -> tuple[str | None, str]:
    """(stated hash, computed hash) of a written line; stated is None when the
    line does not end in a hash field."""
    m = HASH_SUFFIX.search(raw)
    if m is None:
        return None, ""
    return m.group(1).decode(), hashlib.sha256(raw[: m.start()] + b"}").hexdigest()


def mac(key: bytes, record: Mapping[str, Any]) -> str:
    body = canonical({k: v for k, v in record.items() if k not in ("hash", "mac")})
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


def key_id(key: bytes | None) -> str | None:
    """A name for the key that reveals nothing of it: tells a wrong key from tampering."""
    return hmac.new(key, b"innerguard-audit-key-id", hashlib.sha256).hexdigest()[:16] if key else None


def content_key(key: bytes | None) -> tuple[bytes, str]:
    """(key, key id) for hashing prompt/output text. Derived from the operator
    key so that text hashes correlate across restarts; without one, a random
    key per writer session keeps text private but uncorrelatable."""
    if key:
        derived = hmac.new(key, b"innerguard-audit-content", hashlib.sha256).digest()
        return derived, key_id(derived) or ""
    return os.urandom(32), "ephemeral"


def text_digest(ckey: bytes, text: str) -> str:
    return hmac.new(ckey, text.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def load_key(key_file: str | os.PathLike | None = None, *, env: Mapping[str, str] | None = None) -> bytes | None:
    """The operator key: ``key_file`` (hex text or raw bytes), else ``$INNERGUARD_AUDIT_KEY``
    (hex, or the text itself), else None (unsigned checkpoints)."""
    if key_file:
        try:
            raw = Path(key_file).read_bytes()
        except OSError as exc:
            raise InnerguardError(f"cannot read audit key file {key_file}: {exc.strerror or exc}") from None
        return _decode_key(raw.strip() or raw, str(key_file))
    value = (os.environ if env is None else env).get(KEY_ENV)
    return _decode_key(value.encode(), f"${KEY_ENV}") if value else None


def _decode_key(raw: bytes, where: str) -> bytes:
    try:
        key = bytes.fromhex(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        key = raw
    if len(key) < 16:
        raise InnerguardError(f"audit key from {where} is {len(key)} bytes", hint="use at least 16 random bytes, e.g. `openssl rand -hex 32`")
    return key
