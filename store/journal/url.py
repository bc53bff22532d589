"""Journal locations: a file path (SQLite) or a ``postgresql://`` URL, and its printable form.

A URL is read once, by ``parse_url``, exactly as libpq reads it (``conninfo_uri_parse_options``
and ``conninfo_uri_parse_params`` in libpq's ``fe-connect.c``): the user name and password run
from the scheme to the *first* ``@`` (if an ``@`` comes before any ``/``), the password from the
first ``:`` in them; ``#`` and ``?`` there are plain characters; the query splits at ``&`` and
``=`` only; every part is percent-decoded, ``+`` is not a space. The connection is made from that
parse (``libpq_options``) and the printable form is drawn from it (``redact``), so what is shown
and what is connected to never disagree.

A few URLs libpq takes are refused here: one with an ``@`` anywhere but before the host (a
password's unencoded ``@`` or ``/`` makes libpq read its tail as the host, the database or an
option, which errors and headers would then print), a port that is not a number from 1 to 65535
(libpq refuses it only when connecting, as if the server were down), a part that is only spaces
(libpq would set it to ""), and percent-encoded bytes that are not UTF-8. A refusal never
repeats any of the URL's text: libpq's own messages may.

No database driver is imported here, so the CLI can tell the backends apart and print a
location without loading psycopg.
"""

from __future__ import annotations

import os
import re
import urllib.parse

from store.errors import InvalidInputError
from store.records import dataclass

DEFAULT_SCHEMA = "refine"
SCHEMA_PARAM = "schema"  # our own URL query option; never handed to libpq
PREFIXES = ("postgresql://", "postgres://")
UNPARSABLE = "postgresql://(unparsable URL)"
_SCHEMA_NAME = r"[a-z_][a-z0-9_]{0,62}\Z"  # compiled by `re` on first use
# libpq's connection options (PQconninfoOptions, libpq 18) that hold no secret: the printable
# form shows these from the query, and no other (an unknown one may be a password's tail).
_SHOWN_OPTIONS = frozenset("""
    service user passfile channel_binding connect_timeout dbname host hostaddr port
    client_encoding options application_name fallback_application_name keepalives
    keepalives_idle keepalives_interval keepalives_count tcp_user_timeout sslmode sslnegotiation
    sslcompression sslcert sslkey sslcertmode sslrootcert sslcrl sslcrldir sslsni requirepeer
    require_auth min_protocol_version max_protocol_version ssl_min_protocol_version
    ssl_max_protocol_version gssencmode krbsrvname gsslib gssdelegation replication
    target_session_attrs load_balance_hosts oauth_issuer oauth_client_id oauth_scope ssl
    requiressl
""".split()) | {SCHEMA_PARAM}  # fmt: skip  # noqa: SIM905
# Every libpq connection option: text that starts with one and "=" is a keyword/value string.
LIBPQ_OPTIONS = (_SHOWN_OPTIONS - {SCHEMA_PARAM}) | {"password", "sslpassword", "sslkeylogfile"}
_HEX = frozenset("0123456789abcdefABCDEF")  # string.hexdigits, without importing string
_OPTION_NAME = r"[a-z0-9_]+\Z"


# A record, not a NamedTuple: typing's NamedTuple compiles each string annotation (7 compiles
# of every command's start-up), and store.records imports neither dataclasses nor typing.
@dataclass(frozen=True)
class JournalURL:
    """A ``postgresql://`` URL as libpq reads it: its values percent-decoded, None where the URL
    sets none (libpq then takes ``$PGHOST``, ``$PGUSER``, ...)."""

    scheme: str  # "postgresql://" or "postgres://", as written
    user: str | None
    password: str | None
    host: str | None  # libpq's list: "h1,h2" for postgresql://h1,h2:5433/
    port: str | None  # libpq's list: ",5433" there
    dbname: str | None
    query: tuple[tuple[str, str], ...]  # every option, ours too, in order

    @property
    def schema(self) -> str | None:
        """Our ``?schema=`` (the last one given), None when absent."""
        values = [value for name, value in self.query if name == SCHEMA_PARAM]
        return values[-1] if values else None

    def libpq_options(self) -> dict[str, str]:
        """The connection options libpq would take from this URL (its ``conninfo_to_dict``)."""
        fields = ("user", "password", "host", "port", "dbname")
        options = {name: value for name in fields if (value := getattr(self, name)) is not None}
        for name, value in self.query:
            if name == "ssl" and value == "true":  # libpq's JDBC spelling
                name, value = "sslmode", "require"
            if name != SCHEMA_PARAM:
                options[name] = value
        return options

    def shown(self) -> str:
        """The URL without its password or any option that may hold a secret."""
        user = f"{_quote(self.user)}@" if self.user is not None else ""
        authority, query = _authority(self.host, self.port), self.query
        if authority is None:  # lists the authority cannot write ("a%2Cb"): as options
            pairs = (("host", self.host), ("port", self.port))
            authority, query = "", tuple((n, v) for n, v in pairs if v is not None) + query
        path = f"/{_quote(self.dbname)}" if self.dbname is not None else ""
        shown = "&".join(
            f"{_quote(name)}={_quote(value, '/:,')}"
            for name, value in query
            if name in _SHOWN_OPTIONS
        )
        return f"{self.scheme}{user}{authority}{path}{'?' + shown if shown else ''}"


def is_postgres_url(location: str | os.PathLike[str]) -> bool:
    """Whether ``location`` is written as a server URL: its scheme in any case, as the backend
    registry reads it (``store.journal.locations``), so ``redact`` never shows a password that
    only an upper-case scheme hid (libpq refuses such a URL; ``parse_url`` does too)."""
    text = os.fspath(location)
    return text[:13].lower().startswith(PREFIXES)


def valid_schema(name: str) -> bool:
    """A plain lower-case SQL identifier (so it never needs quoting)."""
    return bool(re.match(_SCHEMA_NAME, name))


def redact(location: str | os.PathLike[str]) -> str:
    """The location with any password removed: what errors, headers, --json and logs show.
    Every place that shows a journal location shows this."""
    text = os.fspath(location)
    if not is_postgres_url(text):
        return text
    try:
        return parse_url(text).shown()
    except InvalidInputError:
        return UNPARSABLE


def login_role(location: str | os.PathLike[str]) -> str | None:
    """The PostgreSQL role a connection to ``location`` logs in as, by libpq's rule: the URL's
    user (or its ``?user=``), else ``$PGUSER``, else the operating system's user name (a
    ``?service=`` file's user is not read). None for a file (SQLite) or an unusable URL."""
    text = os.fspath(location)
    if not is_postgres_url(text):
        return None
    try:
        user = parse_url(text).libpq_options().get("user")
    except InvalidInputError:
        return None
    if user:
        return user
    import getpass  # here: it loads termios, which no other command needs

    try:
        return os.environ.get("PGUSER") or getpass.getuser()
    except (OSError, KeyError):  # no user name for this process's uid
        return None


def parse_url(url: str) -> JournalURL:
    """``url`` read as libpq reads it; InvalidInputError (never quoting the URL) when libpq
    would refuse it, or when it has a second ``@`` or a port that is not a port."""
    scheme = next((prefix for prefix in PREFIXES if url.startswith(prefix)), None)
    if scheme is None:
        raise _refused("it must start with postgresql:// or postgres://")
    if "\0" in url:
        raise _refused("it holds a NUL character")
    rest = url[len(scheme) :]
    user = password = None
    end = _find_any(rest, "@/")  # libpq: user info only when an '@' comes before any '/'
    if rest[end : end + 1] == "@":
        userinfo, rest = rest[:end], rest[end + 1 :]
        name, colon, secret = userinfo.partition(":")
        user = _decoded(name)
        password = _decoded(secret) if colon else None
    if "@" in rest:
        raise _refused(
            "it has an '@' after the user name and password; write an '@' in a user name,"
            " password or option as %40, and a '/' there as %2F"
        )
    hosts, ports, rest = _netlocs(rest)
    dbname = None
    if rest.startswith("/"):
        end = _find_any(rest, "?")
        dbname, rest = _decoded(rest[1:end]), rest[end:]
    query = _query(rest[1:]) if rest.startswith("?") else ()
    parsed = JournalURL(scheme, user, password, _decoded(hosts), _decoded(ports), dbname, query)
    check_ports(parsed.libpq_options().get("port", ""))
    return parsed


def check_ports(ports: str) -> None:
    """Refuse a port list (a URL's, or ``$PGPORT``) with an entry that is not a port: libpq
    would refuse it only when connecting, as if the server were unreachable."""
    for port in ports.split(","):
        if port and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
            raise _refused("a port must be a number from 1 to 65535")


def _netlocs(rest: str) -> tuple[str, str, str]:
    """libpq's ``host[:port][,host[:port]...]``: its host list and port list, not yet decoded,
    and the text after them."""
    hosts, ports = [], []
    while True:
        if rest.startswith("["):  # an IPv6 address
            close = rest.find("]")
            if close < 0:
                raise _refused("an IPv6 host has no closing ']'")
            if close == 1:
                raise _refused("an IPv6 host is empty ('[]')")
            host, rest = rest[1:close], rest[close + 1 :]
            if rest and rest[0] not in ":/?,":
                raise _refused("an IPv6 host's ']' is followed by other than ':', '/', '?' or ','")
        else:
            end = _find_any(rest, ":/?,")
            host, rest = rest[:end], rest[end:]
        port = ""
        if rest.startswith(":"):
            end = _find_any(rest, "/?,", 1)
            port, rest = rest[1:end], rest[end:]
        hosts.append(host)
        ports.append(port)
        if not rest.startswith(","):
            return ",".join(hosts), ",".join(ports), rest
        rest = rest[1:]


def _query(text: str) -> tuple[tuple[str, str], ...]:
    """libpq's ``key=value&...``: each part percent-decoded; no part without one '='."""
    options = []
    while text:
        part, _, text = text.partition("&")
        name, equals, value = part.partition("=")
        if not equals:
            raise _refused("a query option has no '=' (write an '&' in a value as %26)")
        if "=" in value:
            raise _refused("a query option has a second '=' (write an '=' in a value as %3D)")
        name = _decode(name)
        if not re.match(_OPTION_NAME, name):  # libpq knows none such; a conninfo would misread it
            raise _refused("a query option's name is not one of libpq's")
        options.append((name, _decode(value)))
    return tuple(options)


def _decoded(raw: str) -> str | None:
    """A URL part as libpq stores it: None when empty (libpq then sets nothing), else
    percent-decoded."""
    return _decode(raw) if raw else None


def _decode(raw: str) -> str:
    """libpq's percent-decoding (``conninfo_uri_decode``, libpq 17 and later): ``%XX`` only,
    never ``%00``; spaces around the value dropped, none inside it."""
    text = raw.strip(" ")
    if " " in text:
        raise _refused("it holds a space (write a space as %20)")
    if raw and not text:  # libpq would set the value "", not leave it unset: say so instead
        raise _refused("a part of it is only spaces")
    data = bytearray()
    at = 0
    while (percent := text.find("%", at)) >= 0:
        data += text[at:percent].encode("utf-8", "surrogateescape")
        digits = text[percent + 1 : percent + 3]
        if len(digits) != 2 or not _HEX.issuperset(digits):
            raise _refused("a '%' is not followed by two hex digits (write a '%' as %25)")
        if digits == "00":
            raise _refused("it holds %00")
        data.append(int(digits, 16))
        at = percent + 3
    data += text[at:].encode("utf-8", "surrogateescape")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise _refused("a percent-encoded value is not UTF-8") from None


def _find_any(text: str, stops: str, start: int = 0) -> int:
    """The index of the first of ``stops`` in ``text`` from ``start``, else ``len(text)``."""
    for at in range(start, len(text)):
        if text[at] in stops:
            return at
    return len(text)


def _authority(host: str | None, port: str | None) -> str | None:
    """``h1,h2:5433`` for libpq's lists; None when an authority cannot say them (libpq reads
    one port, maybe empty, per host there)."""
    hosts, ports = (host or "").split(","), (port or "").split(",")
    if len(ports) != len(hosts):  # no port list for several hosts is not "," either
        return None
    return ",".join(
        _host(name) + (f":{_quote(p)}" if p else "") for name, p in zip(hosts, ports, strict=True)
    )


def _host(name: str) -> str:
    # A host with ':' (an IPv6 address) goes in brackets, where libpq reads it whole.
    return f"[{_quote(name, ':')}]" if ":" in name else _quote(name)


def _quote(text: str, safe: str = "") -> str:
    """Percent-encoded so that libpq reads back ``text`` (and no control character shows)."""
    return urllib.parse.quote(text, safe=safe)


def _refused(why: str) -> InvalidInputError:
    return InvalidInputError(f"not a usable journal URL: {why}")
