"""Reading actions out of what small models really write.

A reply may carry markdown, a missing 'Action:' prefix, a hallucinated 'Observation:' after the
action, several actions at once, quotes, articles and a trailing period. `parse_reply` extracts the
thought and the first action; `match_action` maps it onto the environment's valid actions.
"""
from __future__ import annotations

import difflib
import json
import re
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


def parse_reply(text: str) -> Parsed:
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
            thought.append(line.strip())
    if action is None:
        # no prefix at all: a short last line is most likely the action
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if lines and len(lines[-1].split()) <= 8 and not _PREFIX.match(lines[-1]):
            action = lines[-1]
            thought = thought[:-1]
        else:
            return Parsed(" ".join(thought).strip(), "")
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
