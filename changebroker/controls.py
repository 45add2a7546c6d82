"""Control characters: what acts on whoever reads a text instead of being read.

C0 (U+0000-U+001F), DEL (U+007F), C1 (U+0080-U+009F) and the Unicode line and paragraph
separators (U+2028, U+2029): a terminal obeys them (ESC rewrites what it shows) and a
line-based reader splits at several of them (Python's ``str.splitlines`` at CR, VT, FF,
U+001C-U+001E, U+0085, U+2028 and U+2029). Log values escape them; names that end up in logs,
URLs and Postgres (registry subjects) refuse them.
"""

from __future__ import annotations

import re

CODES = (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029)
# For a character class: ``f"[{CLASS}]"``.
CLASS = "".join(re.escape(chr(code)) for code in CODES)
CONTROL = re.compile(f"[{CLASS}]")
