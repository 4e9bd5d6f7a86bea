"""Text from spans made safe to show: used wherever a report, a table or a message prints
a value that came from a span, a label or a file."""

from __future__ import annotations

# C0, DEL and C1 control characters, shown as escapes: a span attribute or label can carry
# terminal escape sequences (set the title, clear the screen) or characters that break a
# table's alignment, and a report must show the value, not run it.
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}


def printable(text: str) -> str:
    """``text`` with control characters (newlines included) replaced by ``\\xNN`` escapes."""
    return text.translate(_CONTROL)
