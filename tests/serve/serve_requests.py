"""Requests the server tests send: one allowed and one blocked by the
shipped prompt-injection policy (the demo's texts; its policy tests check both)."""
from __future__ import annotations

from innerguard.engine.commands.demo import BENIGN, INJECTED, INSTRUCTION

from serve_process import MODEL

KEY = {"Authorization": "Bearer sk-acme-test"}


def chat(data: str, **extra) -> dict:
    return {"model": MODEL, "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "system", "content": INSTRUCTION}, {"role": "user", "content": data}], **extra}


def completion(data: str, **extra) -> dict:
    """A raw prompt in the model's chat format, the data between innerguard's
    untrusted markers (removed before the model reads the prompt)."""
    prompt = (f"<|im_start|>system\n{INSTRUCTION}<|im_end|>\n<|im_start|>user\n"
              f"<untrusted>{data}</untrusted><|im_end|>\n<|im_start|>assistant\n")
    return {"model": MODEL, "max_tokens": 8, "temperature": 0, "prompt": prompt, **extra}


ALLOWED, BLOCKED = BENIGN, INJECTED
