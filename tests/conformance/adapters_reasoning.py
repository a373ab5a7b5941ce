"""0.3.5's inline reasoning extraction with JSON in and out, for `reasoning.json`.

`extract_think` gives `[thinking or null, cleaned text]`.
"""

from nanobot.utils.helpers import extract_think as _extract_think


def extract_think(text: str) -> list:
    thinking, cleaned = _extract_think(text)
    return [thinking, cleaned]
