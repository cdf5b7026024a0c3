"""Reading actions out of what small models really write.

A reply may carry markdown, a missing 'Action:' prefix, a hallucinated 'Observation:' after the
action, several actions at once, quotes, articles and a trailing period. `parse_reply` extracts the
thought and the first action; `match_action` maps it onto the environment's valid actions.

The rule for a reply with no 'Action:' prefix at all, decided from the records: the FIRST short line
that is a valid action (the first short line when none is, or when the caller gives no valid actions).
In the committed workshop records, 37 replies had several lines and no prefix (12 distinct cases,
`tests/data/prefixless_replies.json`): the first line was a valid action in 37 of 37 and the gold action
in 25 of the 28 whose gold action is known; the last line — what this parser took before — was the gold
action in 9 of 28, and in simonsays taking it lost the game at step 1 ('examine avocado\nwiggle your
toes' ran "wiggle your toes"). The model writes its action first and then keeps going (the next
command of the game, or a copied "(End of example.)").
"""
from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass

FINISH_WORDS = ("finish", "finished", "done", "subtask done", "task done", "task complete", "subtask complete",
                "complete", "stop")

_PREFIX = re.compile(r"^\s*(?:[*_`#>\-\s]*)(thought|think|reasoning|action|actions|act|next action|observation|obs)"
                     r"\s*(?:\d+)?\s*[*_`]*\s*[:：]\s*[*_`]*\s*", re.I)
_ARTICLES = re.compile(r"\b(the|a|an)\b\s*", re.I)


@dataclass
class Parsed:
    thought: str
    action: str          # '' when nothing action-like was found
    finish: bool = False
    raw_action: str = "" # the action as written, before cleaning (for free-form actions: messages, JSON)


def _clean_action(text: str) -> str:
    a = text.strip()
    a = re.sub(r"^[>\-\*\d\.\)\s`'\"]+", "", a)          # list markers, prompts, quotes
    # several actions on one line: keep the first
    a = re.split(r"\s*(?:;|\|| then |, then |\s+and then\s+|\s\d\.\s|\n)\s*", a, maxsplit=1)[0]
    a = a.strip().strip("`'\"").strip()
    a = re.sub(r"[\.\!。]+$", "", a).strip()
    return a


def parse_reply(text: str, is_valid: Callable[[str], bool] | None = None) -> Parsed:
    """Thought and action of a reply. `is_valid(action)` (e.g. matching the environment's valid actions)
    chooses among the lines of a reply that has no 'Action:' prefix; see the module docstring."""
    text = (text or "").strip()
    if not text:
        return Parsed("", "")
    if text.startswith("{"):
        try:
            obj = json.loads(text)
            if isinstance(obj, dict) and "action" in obj:
                action = _clean_action(str(obj["action"]))
                return Parsed(str(obj.get("thought", "")), action, is_finish(action), str(obj["action"]).strip())
        except json.JSONDecodeError:
            pass
    thought, action = [], None
    free: list[int] = []   # positions in `thought` of lines written without any prefix
    # 'Thought: ... Action: ...' on one line
    text = re.sub(r"\s+(Action\s*[:：])", r"\n\1", text, flags=re.I)
    for line in text.splitlines():
        m = _PREFIX.match(line)
        key = m.group(1).lower() if m else None
        body = line[m.end():] if m else line
        if key in ("observation", "obs"):
            if action is not None:
                break  # the model went on to imagine the environment's answer
            continue
        if key in ("action", "actions", "act", "next action"):
            if action is None and body.strip():
                action = body
            continue
        if key in ("thought", "think", "reasoning"):
            thought.append(body.strip())
            continue
        if action is None and line.strip():
            if len(line.split()) <= 8:
                free.append(len(thought))
            thought.append(line.strip())
    if action is None:
        # No prefix at all: the first short line that is a valid action, else the first short line.
        if not free:
            return Parsed(" ".join(thought).strip(), "")
        pick = next((i for i in free if is_valid is not None and is_valid(_clean_action(thought[i]))), free[0])
        action, thought = thought[pick], thought[:pick]
    raw = action.strip()
    action = _clean_action(action)
    return Parsed(" ".join(thought).strip(), action, is_finish(action), raw)


def parse_json(text: str, expect: type):
    """The first JSON value of type `expect` (list or dict) in a reply, or None."""
    text = text or ""
    opener = "[" if expect is list else "{"
    for start in [m.start() for m in re.finditer(re.escape(opener), text)]:
        try:
            value, _ = json.JSONDecoder().raw_decode(text[start:])
        except json.JSONDecodeError:
            continue
        if isinstance(value, expect):
            return value
    return None


def normalize(action: str) -> str:
    a = action.lower().strip()
    a = re.sub(r"[^\w\s\-']", " ", a)
    return " ".join(a.split())


def is_finish(action: str) -> bool:
    return normalize(action) in FINISH_WORDS


def match_action(action: str, valid: list[str], cutoff: float = 0.85) -> str | None:
    """The valid action the model meant, or None. Exact, then without articles, then a close spelling."""
    if not action or not valid:
        return None
    table = {normalize(v): v for v in valid}
    key = normalize(action)
    if key in table:
        return table[key]
    bare = normalize(_ARTICLES.sub("", key))
    bare_table = {normalize(_ARTICLES.sub("", k)): v for k, v in table.items()}
    if bare in bare_table:
        return bare_table[bare]
    close = difflib.get_close_matches(bare, list(bare_table), n=1, cutoff=cutoff)
    return bare_table[close[0]] if close else None


def suggestions(action: str, valid: list[str], n: int = 5) -> list[str]:
    """Valid actions that look most like what the model wrote (shown back to it after a mistake)."""
    key = normalize(action)
    verb = key.split(" ")[0] if key else ""
    close = difflib.get_close_matches(key, [normalize(v) for v in valid], n=n, cutoff=0.4)
    table = {normalize(v): v for v in valid}
    out = [table[c] for c in close]
    if len(out) < n and verb:
        out += [v for v in valid if normalize(v).startswith(verb + " ") and v not in out][: n - len(out)]
    return out[:n]
