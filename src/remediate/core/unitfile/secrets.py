"""PURE: secret values in unit files, environment files, command lines and journal text, replaced by ``***``.

One left-to-right scan: every regex below is anchored by a lookbehind to the start of a word, so each
position is tried once, and each value is scanned once (quote partners come from a precomputed table).
The work is linear in the text's length (bench/masking.py measures it).

A masked value never covers a setting we edit (``--mem-fraction-static``, ``--chunked-prefill-size``,
``PYTORCH_CUDA_ALLOC_CONF``): a diff of masked texts always shows a changed flag.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from functools import lru_cache

MASK = "***"

# Names whose value is secret (case-insensitive), as a secret scanner reads them: ``HF_TOKEN``,
# ``OPENAI_API_KEY``, ``OPENAI_APIKEY``, ``AWS_SECRET_ACCESS_KEY``, ``DB_PASSWORD``, ``DB_PASS``,
# ``AUTH_HEADER``, ``GOOGLE_CREDENTIALS``, ``SetCredential`` (systemd.exec: ``SetCredential=ID:VALUE``).
_SECRET_NAME = re.compile(
    r"(?:TOKEN$|(?:^|_)TOKENS?_|(?:^|_)KEY$|(?:^|_)KEY_|APIKEY|API_KEY|ACCESS_KEY|PRIVATE_KEY|SECRET|PASSWORD|PASSWD"
    r"|(?:^|_)PASS(?:$|_)|AUTH|HEADER|CREDENTIAL|COOKIE)",
    re.IGNORECASE,
)
# The settings we edit, argparse's abbreviations too (``--mem-frac``): never inside a masked value.
_PROTECTED = re.compile(r"--(?:mem|chunk)[A-Za-z-]*|PYTORCH_CUDA_ALLOC_CONF")
_PROTECTED_MIN = len("--mem")
# A quote that opens a shell script (``bash -c "HF_TOKEN=x exec python3 …"``, ``sh -lc '…'``): an assignment
# at its start ends at the first blank, not at the closing quote (which ends the script).
_SCRIPT_OPENER = re.compile(r"(?:^|[ \t])-[A-Za-z]*c[ \t]+$")

_CANDIDATE = re.compile(
    # NAME=VALUE: NAME starts a word (after a blank, a quote, '=', a shell operator) or follows docker's
    # attached ``-e`` (``-eHF_TOKEN=x``); whether NAME is secret is decided by _SECRET_NAME.
    r"(?P<name>(?:(?<![A-Za-z0-9_\\-])|(?<=-e))[A-Za-z_][A-Za-z0-9_]*)="
    # --api-key VALUE, --hf-token=VALUE, --db-password "VALUE", --openai-apikey VALUE.
    r"|(?<![A-Za-z0-9-])--(?:[A-Za-z0-9-]*-)?(?:key|token|secret|password|passwd|apikey|credentials?)"
    r"(?P<sep>=|(?:[ \t]|\\\r?\n)+)"
    # scheme://user:password@host (the last '@' before the host ends the password: ``p@ss@proxy``), but never
    # past an already masked ``***@``: masking a value after it can remove the '/' that ended the password
    # (``http://u:p@X-Auth-Token:/;@``), and a second pass must not then swallow the rest.
    r"|(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@'\"]*:(?P<password>(?:[^/\s'\"@]|(?<!\*\*\*)@)+)@"
    # An HTTP header whose value is secret (case-insensitive, RFC 9110 field names): ``X-Api-Key: v``,
    # ``Api-Key:``, any ``*-Token:`` (``X-Auth-Token``, ``Private-Token``), ``Authorization:`` and
    # ``Proxy-Authorization:`` (RFC 9110 §11.6.2, §11.7.2), ``Cookie:``/``Set-Cookie:`` (RFC 6265 §4):
    # bare in a log line, or inside ``--header "…"``, ``-H '…'``, ``Environment="…"``.
    # Any field name followed by ":" is a candidate (one possessive scan of the word); _SECRET_HEADER decides.
    # Not after "#": sglang's scheduler counters ("#new-token: 7", "#cached-token: 0") are not headers.
    r"|(?<![A-Za-z0-9_#-])(?P<header>[A-Za-z][A-Za-z0-9-]*+)[ \t]*+:[ \t]*"
    # HTTP credentials (RFC 6750 b64token, RFC 7617): ``Bearer <token>``, ``Basic <base64>``.
    r"|(?<![A-Za-z0-9_-])(?P<scheme>[Bb]earer|BEARER|[Bb]asic|BASIC)[ \t]+(?P<credential>[A-Za-z0-9._~+/-]+=*)"
    # A quoted key of a dict or JSON object: ``'api_key': 'sk-…'`` (sglang 0.5.23 logs its args as a dict,
    # entrypoints/engine.py ``_server_args_for_logging``), ``"hf_token": "hf_…"``.
    r"|(?<![A-Za-z0-9_])(?P<kq>['\"])(?P<key>[A-Za-z_][A-Za-z0-9_.-]*)(?P=kq)[ \t]*:[ \t]*"
)
_SCHEME_VALUE = re.compile(r"(?P<word>[Bb]earer|BEARER|[Bb]asic|BASIC)[ \t]+[A-Za-z0-9._~+/-]+=*")
_SECRET_HEADER = re.compile(
    r"(?:[a-z0-9]+-)*api-?key|(?:[a-z0-9]+-)+token|(?:proxy-)?authorization|(?:set-)?cookie", re.IGNORECASE
)
# An Authorization value's scheme (RFC 9110 §11.4 auth-scheme is a token): ``Bearer``, ``Basic``, ``token``,
# ``Digest``; what follows it is the credential.
_AUTH_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9._-]*[ \t]+(?=[^ \t\r\n])")
_BASIC_LOOK = re.compile(r"[0-9+/=]|[a-z].*[A-Z]|[A-Z].*[a-z]")
_PLAIN = re.compile(r"[^ \t;&|)\r\n\\\"']*")
_UNESCAPED_QUOTE = re.compile(r"(?<!\\)(?:\\\\)*[\"']")
_LINE_END = re.compile(r"[\r\n]")
_BARE_VALUE = re.compile(r"[^,}\]\s]*")  # a dict/JSON value that is not a string: up to the next item
# A repr's literal followed by the repr's own punctuation (``hf_token=None,``): the punctuation stays. The mask
# itself counts as such a literal, so masking a masked text changes nothing (``Cookie: 0)`` → ``Cookie: ***)``).
_LITERAL_TAIL = re.compile(r"(None|True|False|null|true|false|-?\d+(?:\.\d+)?|\*\*\*)([,)\]}]+)")


class _Text:
    """A text with its line ends and unescaped quotes indexed, so a value's end is found in its own length."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.line_ends = [m.start() for m in _LINE_END.finditer(text)]
        self.quotes: dict[str, list[int]] = {'"': [], "'": []}
        for m in _UNESCAPED_QUOTE.finditer(text):
            self.quotes[text[m.end() - 1]].append(m.end() - 1)

    def eol(self, pos: int) -> int:
        i = bisect_right(self.line_ends, pos - 1)
        return self.line_ends[i] if i < len(self.line_ends) else len(self.text)

    def partner(self, pos: int, char: str, eol: int) -> int | None:
        """The next unescaped ``char`` after ``pos`` on the line, or None."""
        positions = self.quotes[char]
        i = bisect_right(positions, pos)
        return positions[i] if i < len(positions) and positions[i] < eol else None

    def word_end(self, start: int, eol: int) -> int:
        """End of the shell/systemd word starting at ``start``: the next blank or shell operator outside
        quotes. Backslash escapes are skipped; a line continuation ends the word; a quote without a partner
        on the line ends it (it closes an outer string, such as ``bash -c '…'``)."""
        text = self.text
        pos = start
        while True:
            m = _PLAIN.match(text, pos, eol)
            pos = m.end() if m else pos
            if pos >= eol:
                return eol
            char = text[pos]
            if char == "\\":
                if pos + 1 >= eol:
                    return pos  # a line continuation ends the word
                pos += 2
                continue
            if char in "\"'":
                close = self.partner(pos, char, eol)
                if close is None:
                    return pos
                pos = close + 1
                continue
            return pos


@lru_cache(maxsize=1024)
def _is_secret_name(name: str) -> bool:
    return _SECRET_NAME.search(name) is not None


def _masked(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return f"{value[0]}{MASK}{value[0]}"
    if literal := _LITERAL_TAIL.fullmatch(value):
        return MASK + literal.group(2)
    if value[:1] in ("'", '"'):  # a quoted value followed by punctuation (``api_key='…',`` in a repr)
        close = value.find(value[0], 1)
        tail = value[close + 1 :] if close > 0 else ""
        if tail and tail.strip(",)]}") == "":
            return f"{value[0]}{MASK}{value[0]}{tail}"
    return MASK


def _assignment_end(index: _Text, name_start: int, start: int) -> int:
    """End of a secret ``NAME=``'s value: a word, or up to the closing quote of a quoted assignment
    (``Environment="DB_PASSWORD=p4ss word"``, ``docker -e "…"``) unless the quote opens a ``-c`` script."""
    text = index.text
    eol = index.eol(start)
    before = text[name_start - 1] if name_start else ""
    if before and before in "\"'":
        close = index.partner(name_start - 1, before, eol)
        if close is not None:
            if _SCRIPT_OPENER.search(text[max(0, name_start - 17) : name_start - 1]) is None:
                return close
            return min(index.word_end(start, eol), close)
    end = index.word_end(start, eol)
    scheme = _SCHEME_VALUE.match(text, start, eol) if text[start : start + 1] in ("B", "b") else None
    if scheme is not None and scheme.end("word") == end:
        # AUTH_HEADER=Bearer <token>: the token's whole word is part of the value (``Bearer a@b``: not ``***@b``)
        end = index.word_end(scheme.end(), eol)
    return end


@lru_cache(maxsize=1024)
def _is_secret_header(name: str) -> bool:
    return _SECRET_HEADER.fullmatch(name) is not None


def _header_span(index: _Text, m: re.Match[str]) -> tuple[int, int] | None:
    """A secret header's value: up to the quote that opened the header (``-H 'Cookie: a=b; c=d'``), else a
    word (a cookie header: the rest of the line, every pair of it); an Authorization keeps its scheme."""
    if not _is_secret_header(m.group("header")):
        return None
    text = index.text
    start = m.end()
    eol = index.eol(start)
    if start >= eol:
        return None
    name = m.group("header").lower()
    before = text[m.start() - 1] if m.start() else ""
    close = index.partner(m.start() - 1, before, eol) if before in ("'", '"') else None
    if close is not None and close <= start:
        return None
    if name.endswith("cookie"):
        return start, eol if close is None else close
    end = index.word_end(start, eol) if close is None else close
    if name.endswith("authorization") and (scheme := _AUTH_SCHEME.match(text, start, eol)) is not None:
        if scheme.end() < (end if close is not None else eol):
            start = scheme.end()
            end = index.word_end(start, eol) if close is None else close
    return start, end


def _span(index: _Text, m: re.Match[str]) -> tuple[int, int] | None:
    """The span of the secret value ``m`` found, or None when it is not a secret."""
    text = index.text
    if m.group("name") is not None:
        if not _is_secret_name(m.group("name")):
            return None
        return m.end(), _assignment_end(index, m.start("name"), m.end())
    if m.group("sep") is not None:
        start = m.end()
        if start >= len(text) or text[start] in "-\r\n":
            return None
        return start, index.word_end(start, index.eol(start))
    if m.group("password") is not None:
        return m.start("password"), m.end("password")
    if m.group("header") is not None:
        return _header_span(index, m)
    if m.group("key") is not None:
        if not _is_secret_name(m.group("key").replace("-", "_").replace(".", "_")):
            return None
        start = m.end()
        eol = index.eol(start)
        char = text[start : start + 1]
        if char in ("'", '"'):
            close = index.partner(start, char, eol)
            return (start, close + 1) if close is not None else (start, index.word_end(start, eol))
        bare = _BARE_VALUE.match(text, start, eol)
        return (start, bare.end()) if bare is not None and bare.end() > start else None
    credential = m.group("credential")
    if m.group("scheme").lower() == "basic" and (len(credential) < 8 or not _BASIC_LOOK.search(credential)):
        return None  # prose ("Basic setup"), not base64
    return m.start("credential"), m.end("credential")


def _unprotected(text: str, start: int, end: int) -> int:
    """``end``, moved back before any setting we edit (and the blanks before it)."""
    hit = _PROTECTED.search(text, start, end) if end - start >= _PROTECTED_MIN else None
    if hit is None:
        return end
    end = hit.start()
    while end > start and text[end - 1] in " \t":
        end -= 1
    return end


def mask_secrets(text: str) -> str:
    """Replace every secret value with ``***``: secret-looking ``NAME=VALUE`` assignments (unit,
    environment file, ``docker -e``, ``env``, shell ``export``, ``SetCredential=``), secret flags
    (``--api-key VALUE``, quoted or not, inside ``bash -c`` strings too), passwords in URLs, secret HTTP
    headers (``X-Api-Key:``, ``*-Token:``, ``Authorization:``, ``Cookie:``, ``Set-Cookie:``), HTTP
    ``Bearer``/``Basic`` credentials, and the values of secret keys in dict and JSON text."""
    index: _Text | None = None
    out: list[str] = []
    pos = 0
    search_at = 0
    while (m := _CANDIDATE.search(text, search_at)) is not None:
        index = index or _Text(text)
        span = _span(index, m)
        search_at = max(m.end(), m.start() + 1)
        if span is None:
            continue
        start, end = span
        end = _unprotected(text, start, end)
        if start < pos or end <= start:
            continue
        out.append(text[pos:start] + _masked(text[start:end]))
        pos = end
        search_at = max(end, search_at)
    out.append(text[pos:])
    return "".join(out)
