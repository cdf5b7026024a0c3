"""Text helpers every layer shares."""
from __future__ import annotations


def cut(text, n: int, mark: str = "…") -> str:
    """`text` with its whitespace collapsed, at most `n` characters; a cut text ends in `mark`
    (mark="" cuts plainly at n)."""
    text = " ".join(str(text).split())
    if len(text) <= n:
        return text
    return text[: n - len(mark)] + mark if mark else text[:n]


def cut_middle(text, n: int, head: float = 0.3, mark: str = " … ") -> str:
    """`text` with its whitespace collapsed, at most `n` characters, cut in the middle: its first
    `head` share and its end. A TextWorldExpress room description ends with what is new (an object, the
    exits), which a cut at the end loses."""
    text = " ".join(str(text).split())
    if len(text) <= n:
        return text
    first = int((n - len(mark)) * head)
    return text[:first].rstrip() + mark + text[len(text) - (n - len(mark) - first):].lstrip()
