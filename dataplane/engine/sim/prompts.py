"""A prompt as the prefix cache sees it: a chain of token blocks. Pure.

engine-sim has no tokenizer: a token is about four bytes of prompt text (``models.
prompt_tokens_of_text``) and a token id list is four bytes per id, so a KV page of ``block_size``
tokens is ``4 × block_size`` bytes of the prompt. Each block's id hashes its parent's id with its
bytes (as SGLang's page hashes chain), so two prompts share exactly the blocks of their common
prefix, and only whole blocks are cached (the radix cache matches whole pages).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from typing import Any

BYTES_PER_TOKEN = 4


def prompt_blocks(data: bytes, block_size: int) -> tuple[int, ...]:
    """The ids of the whole blocks of ``data`` (a prompt's text or packed token ids)."""
    step = BYTES_PER_TOKEN * block_size
    blocks: list[int] = []
    parent = 0
    for start in range(0, len(data) - step + 1, step):
        parent = hash((parent, data[start : start + step]))
        blocks.append(parent)
    return tuple(blocks)


def token_bytes(ids: Iterable[int]) -> bytes:
    """Token ids as prompt bytes (four per id)."""
    return array("I", (i & 0xFFFFFFFF for i in ids)).tobytes()


def text_bytes(value: Any) -> bytes:
    """The prompt bytes of a completion/generate prompt: text, ids, or a batch of either."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    if isinstance(value, list):
        if value and isinstance(value[0], int):
            return token_bytes(v for v in value if isinstance(v, int))
        return b"".join(text_bytes(v) for v in value)
    return b""


def content_bytes(content: Any) -> bytes:
    """A chat message's content as prompt bytes: the string, or its text parts."""
    if isinstance(content, str):
        return content.encode("utf-8", "surrogatepass")
    if isinstance(content, list):
        return b"".join(
            p["text"].encode("utf-8", "surrogatepass")
            for p in content
            if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return b""
