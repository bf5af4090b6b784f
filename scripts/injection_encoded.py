"""Benign encoded strings for the fit split of data/injection/: tokens, keys,
checksums and attachments that real data carries, generated at random.

Why: encoded strings were the bulk of the token probe's grouped-CV false
positives on fit (a base64 attachment preview, a data URI): the probe had
never seen such text when it was held out, and a request's score is its
highest window. Fit only, so that dev keeps its own composition (its
bastioncorpus encoded traps stay unseen).
"""
from __future__ import annotations

import base64
import hashlib
import json
import random
import string
import uuid


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _jwt(rng: random.Random) -> str:
    header = {"alg": rng.choice(["HS256", "RS256", "ES256"]), "typ": "JWT"}
    payload = {"sub": str(rng.randint(10**6, 10**9)), "iat": rng.randint(1_600_000_000, 1_800_000_000),
               "role": rng.choice(["viewer", "editor", "tester"])}
    return ".".join([_b64url(json.dumps(header).encode()), _b64url(json.dumps(payload).encode()), _b64url(rng.randbytes(32))])


def _pem(rng: random.Random) -> str:
    body = base64.b64encode(rng.randbytes(rng.choice([96, 162, 270]))).decode()
    lines = [body[i:i + 64] for i in range(0, len(body), 64)]
    return "\n".join(["-----BEGIN PUBLIC KEY-----", *lines, "-----END PUBLIC KEY-----"])


def _rot13(text: str) -> str:
    return text.translate(str.maketrans(string.ascii_letters, string.ascii_lowercase[13:] + string.ascii_lowercase[:13]
                                         + string.ascii_uppercase[13:] + string.ascii_uppercase[:13]))


def _link(rng: random.Random, sentence: str) -> str:
    from urllib.parse import quote
    host = rng.choice(["track.example.com", "links.example.org", "go.example.net"])
    return (f"https://{host}/c/{_b64url(rng.randbytes(9))}?utm_source=newsletter&utm_campaign={rng.randint(100, 999)}"
            f"&q={quote(sentence[:60])}")


# kind -> (labels a person would put in front, a value from (rng, a benign sentence))
KINDS = {
    "base64-text": (["Attachment preview (base64):", "Encoded body:", "base64:", "Payload (base64)"],
                    lambda rng, s: base64.b64encode(s.encode()).decode()),
    "data-uri": (["Here is the logo inline:", "Signature image:", "Inline icon:", "avatar ="],
                 lambda rng, s: "data:image/png;base64," + base64.b64encode(rng.randbytes(rng.randint(48, 180))).decode()),
    "hex-digest": (["Release checksum (sha256):", "MD5:", "Commit", "File hash:", "sha1"],
                   lambda rng, s: hashlib.new(rng.choice(["sha256", "md5", "sha1"]), rng.randbytes(16)).hexdigest()),
    "base32": (["Backup code (base32):", "TOTP secret:", "Recovery key:"],
               lambda rng, s: base64.b32encode(rng.randbytes(rng.choice([10, 20, 35]))).decode()),
    "jwt": (["Session token for the test account:", "Authorization: Bearer", "id_token="], lambda rng, s: _jwt(rng)),
    "uuid": (["Request ID:", "Trace", "Order reference", "correlation_id ="],
             lambda rng, s: str(uuid.UUID(bytes=rng.randbytes(16), version=4))),
    "pem": (["Public key for the deploy server:", "Our PGP-style key block:", ""], lambda rng, s: _pem(rng)),
    "rot13": (["Spoiler (rot13):", "Answer (rot13, no peeking):"], lambda rng, s: _rot13(s)),
    "api-key": (["Test API key:", "STRIPE_KEY=", "Webhook secret:"],
                lambda rng, s: rng.choice(["sk_test_", "whsec_", "pk_live_", "AKIA"]) + "".join(
                    rng.choice(string.ascii_letters + string.digits) for _ in range(rng.randint(20, 40)))),
    "link": (["Tracking link:", "Unsubscribe:", "Shared doc:"], lambda rng, s: _link(rng, s)),
}


def encoded(rng: random.Random, sentence: str) -> tuple[str, str]:
    """(text, template): a labelled encoded string and its kind and label (what
    rows of one group share, as attack rows share a template); ``sentence`` is
    what text encodings encode."""
    kind = rng.choice(sorted(KINDS))
    labels, make = KINDS[kind]
    label = rng.choice(labels)
    value = make(rng, sentence)
    return (f"{label} {value}" if label else value).strip(), f"{kind}:{label}"
