r"""Make untrusted text safe to show in a terminal.

Model replies, model names and persona keys reach the terminal through rich. A
reply holding ``ESC ] 0 ; title BEL`` would retitle the terminal, ``ESC [ 2 J``
would clear it, cursor moves and ``\r`` can overwrite what was printed, and
bidirectional overrides reorder it; ``[red]`` or ``[link=...]`` would be taken as
rich markup. :func:`clean` removes the control and escape sequences (keeping
newlines and tabs), :func:`markup` also escapes rich markup, for text placed
inside a markup string. JSON output needs neither, but :func:`safe_json`: the encoders
escape the C0 controls, not the C1 ones (``U+009B`` is an 8-bit CSI) nor the bidi overrides,
which it writes as ``\uXXXX`` escapes (the same data once parsed).

Both also mask credentials in URLs (:func:`moot.redact.text`): a server's error body
or a file name may quote an endpoint with its key. And every console the CLI makes
(:func:`moot.cli._console.make_console`) passes each piece of text it writes through
:func:`strip_controls` as a last line of defence, so a file name or an error put
into an f-string without :func:`markup` cannot drive the terminal either.
"""

from __future__ import annotations

import re

from rich.markup import escape

import moot.redact as redact

__all__ = ["clean", "has_controls", "markup", "safe_json", "strip_controls"]

# Order matters: whole escape sequences first, so their parameters go with them,
# then any lone control character left over.
_SEQUENCES = re.compile(
    r"""
    \x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?          # OSC: ESC ] ... (BEL | ESC \ | unterminated)
    | \x9d[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?  # OSC, 8-bit introducer
    | \x1b[P^_X][^\x1b]*(?:\x1b\\)?             # DCS, PM, APC, SOS strings
    | \x1b\[[0-?]*[ -/]*[@-~]?                   # CSI: cursor moves, erase, colours
    | \x9b[0-?]*[ -/]*[@-~]?                     # CSI, 8-bit introducer
    | \x1b[ -/]*[0-~]?                           # any other ESC sequence (charset, reset...)
    """,
    re.VERBOSE,
)
# C0 controls but \t and \n, DEL, C1 controls, and the bidirectional overrides and
# isolates that make text display in another order than it reads.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


# What a JSON encoder leaves raw (it escapes C0 itself) that a terminal acts on or reorders: DEL,
# C1 controls, the bidi marks, overrides and isolates, the Unicode line and paragraph separators.
_JSON_RAW = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def safe_json(text: str) -> str:
    r"""JSON text with each terminal control an encoder leaves raw written as its ``\uXXXX`` escape.

    Those characters only occur inside JSON strings, where the escape is valid and parses to the
    same character: the data is unchanged, the terminal is not driven. Every JSON the CLI prints
    goes through it, to a terminal or not, so the bytes do not depend on where stdout goes.
    """
    return _JSON_RAW.sub(_json_escape, text)


def has_controls(text: str) -> bool:
    """Whether ``text`` holds a control character, an escape sequence or a bidi override."""
    return _CONTROLS.search(text) is not None


def strip_controls(text: str) -> str:
    """``text`` without control and escape sequences (a carriage return is dropped too)."""
    if not has_controls(text):
        return text
    return _CONTROLS.sub("", _SEQUENCES.sub("", text))


def clean(text: str) -> str:
    """``text`` without terminal control and escape sequences, and with URL credentials masked.

    Newlines and tabs stay. A carriage return becomes a newline, so text after it
    is shown instead of overwriting what came before.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return redact.text(strip_controls(text))


def markup(text: object) -> str:
    """``str(text)`` cleaned and with rich markup escaped, to embed in a markup string."""
    return escape(clean(str(text)))
