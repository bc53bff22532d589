"""Journal locations: a file path (SQLite) or a ``postgresql://`` URL, and its printable form.

No database driver is imported here, so the CLI can tell the backends apart and print a
location without loading psycopg.
"""

from __future__ import annotations

import os
import re
import urllib.parse

DEFAULT_SCHEMA = "refine"
SCHEMA_PARAM = "schema"  # our own URL query option; removed before libpq sees the URL
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}\Z")
_SECRET_PARAMS = {"password", "sslpassword"}


def is_postgres_url(location: str | os.PathLike[str]) -> bool:
    text = os.fspath(location)
    return text.startswith(("postgresql://", "postgres://"))


def split_schema(url: str) -> tuple[str, str | None]:
    """The URL without our ``schema`` option, and that option's value (None when absent)."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    schemas = [value for name, value in query if name == SCHEMA_PARAM]
    rest = [(name, value) for name, value in query if name != SCHEMA_PARAM]
    clean = parts._replace(query=urllib.parse.urlencode(rest))
    return urllib.parse.urlunsplit(clean), (schemas[-1] if schemas else None)


def valid_schema(name: str) -> bool:
    """A plain lower-case SQL identifier (so it never needs quoting)."""
    return bool(_SCHEMA_NAME.match(name))


def redact(location: str | os.PathLike[str]) -> str:
    """The location with any password removed: what errors, headers and --json may show."""
    text = os.fspath(location)
    if not is_postgres_url(text):
        return text
    try:
        parts = urllib.parse.urlsplit(text)
        netloc = parts.netloc
        if "@" in netloc:
            auth, host = netloc.rsplit("@", 1)
            netloc = auth.split(":", 1)[0] + "@" + host
        query = [
            (name, value)
            for name, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
            if name not in _SECRET_PARAMS
        ]
        return urllib.parse.urlunsplit(
            parts._replace(netloc=netloc, query=urllib.parse.urlencode(query))
        )
    except ValueError:
        return "postgresql://(unparsable URL)"
