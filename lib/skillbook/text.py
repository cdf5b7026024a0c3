"""Text helpers every layer shares."""
from __future__ import annotations


def cut(text, n: int, mark: str = "…") -> str:
    """`text` with its whitespace collapsed, at most `n` characters; a cut text ends in `mark`
    (mark="" cuts plainly at n)."""
    text = " ".join(str(text).split())
    if len(text) <= n:
        return text
    return text[: n - len(mark)] + mark if mark else text[:n]
