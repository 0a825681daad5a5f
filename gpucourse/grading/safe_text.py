"""Names from paths a student controls, made safe to show: on a terminal (control characters escaped) and in a
spreadsheet (a CSV cell starting with ``= + - @`` or a tab/CR prefixed with ``'``, OWASP's advice against CSV
injection), so a folder named ``=HYPERLINK(...)`` or holding a terminal escape sequence is shown, never run."""
from __future__ import annotations


def printable(text: str) -> str:
    """``text`` with control characters (terminal escapes, newlines, NUL) shown as Python escapes, so a name from
    a path cannot move the cursor, clear the instructor's terminal or split a line."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in str(text))


def csv_cell(value) -> str:
    """A CSV cell that a spreadsheet shows as text: control characters escaped, and a leading ``= + - @`` (a
    formula) defused with a ``'`` (the prefix spreadsheets hide and treat as "text"). Numbers are written by the
    caller as numbers, not through here."""
    text = printable(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def listed(names: list, most: int = 20) -> str:
    """Up to ``most`` of ``names``, shown safely and comma-separated, then how many more; "none" for no names."""
    shown = ", ".join(map(printable, names[:most]))
    return shown + (f" and {len(names) - most} more" if len(names) > most else "") if names else "none"
