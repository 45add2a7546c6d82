"""Whole numbers as clients write them in paths, cursors and metadata."""


def whole_number(text: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also accepts "²", which ``int`` refuses."""
    return text.isascii() and text.isdigit()
