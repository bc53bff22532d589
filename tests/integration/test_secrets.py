"""A password never shows, whatever the journal URL holds (issue 21, item 1): the password corpus.

Roles on the test server have every URL delimiter (``# ? / @ : %``, space, ``& = ,`` and the
percent-encoded forms ``%23`` and ``%40``) in their names and in their passwords. Each is written
into journal URLs in every placement (the user info and the query; percent-encoded, and raw as an
operator may type it), with the right and with a wrong password, and every output is read: the
CLI's stdout and stderr (text and ``--json``, run as a subprocess), ``refine copy`` and
``refine serve``, the dashboard's header and screen (Textual Pilot), the process list of a node
and its workers, and the node's logs. A raw form works where libpq reads it as meant and is
refused as input (exit 2) where it would not; nothing ever shows the password.

Every password is ``TOPSECRET…`` on both sides of its delimiter, so any piece of one, however a
URL was cut, holds ``TOPSECRET``. The URL reading itself (``store.journal.url``) is checked
against libpq's own (``psycopg.conninfo``), on hand-written URLs and on generated ones.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from refine_tui.app import RefineApp
from store.errors import InvalidInputError
from store.journal.postgres import connection_info
from store.journal.url import JournalURL, parse_url, redact
from tests.helpers.postgres_server import PostgresServer
from tests.helpers.waits import until, wait_until

PY = sys.executable
MARK = "TOPSECRET"
DELIMITERS = ("#", "?", "/", "@", ":", "%", " ", "&", "=", ",", "%23", "%40")
# `refine init`'s exit code with the delimiter written raw (not percent-encoded) in:
#        (the password in the user info, the password in the query,
#         the user name in the user info, the user name in the query)
# 0: read as meant; 2: refused as input (libpq would read another password, user or host);
# 3: read as written ("%23" is "#"), so the server refuses the login.
RAW_EXIT = {
    "#": (0, 0, 0, 0),
    "?": (0, 0, 0, 0),
    "/": (2, 0, 2, 0),  # libpq: no user info before a '/' ("u:p/q@h" is host u, port p)
    "@": (2, 2, 2, 2),  # libpq: the user info ends at the first '@'
    ":": (0, 0, 3, 0),  # the user name ends at the first ':'
    "%": (2, 2, 2, 2),  # not followed by two hex digits
    " ": (2, 2, 2, 2),  # libpq 17+: spaces around a value dropped, none inside it
    "&": (0, 2, 0, 2),  # the query splits at '&'
    "=": (0, 2, 0, 2),  # ... and a second '=' is refused
    ",": (0, 0, 0, 0),
    "%23": (3, 3, 3, 3),
    "%40": (3, 3, 3, 3),
}
PLACEMENTS = ("password-in-userinfo", "password-in-query", "user-in-userinfo", "user-in-query")
pytestmark = pytest.mark.postgres


@dataclass(frozen=True)
class Login:
    user: str
    password: str


@dataclass
class Corpus:
    server: PostgresServer
    dbname: str
    logins: dict[str, Login]  # by delimiter, and "all" (every delimiter at once)

    def url(self, login: Login, *, password: str | None = None, query: str = "") -> str:
        """Percent-encoded, as it should be written."""
        quote = urllib.parse.quote
        userinfo = f"{quote(login.user, safe='')}:{quote(password or login.password, safe='')}"
        return self.server.url_with_userinfo(self.dbname, userinfo, query)

    def raw_url(self, delimiter: str, placement: str) -> str:
        """The login of ``delimiter`` with its user name or password written raw in ``placement``;
        the other one percent-encoded."""
        login = self.logins[delimiter]
        user, password = (
            urllib.parse.quote(text, safe="") for text in (login.user, login.password)
        )
        if placement == "password-in-userinfo":
            return self.server.url_with_userinfo(self.dbname, f"{user}:{login.password}")
        if placement == "password-in-query":
            return self.server.url_with_userinfo(self.dbname, user, f"password={login.password}")
        if placement == "user-in-userinfo":
            return self.server.url_with_userinfo(self.dbname, f"{login.user}:{password}")
        return self.server.url_with_userinfo(
            self.dbname, "", f"user={login.user}&password={password}"
        )


@pytest.fixture(scope="module")
def corpus(postgres_server: PostgresServer) -> Iterator[Corpus]:
    """One database, a journal in it, and a superuser login per delimiter (and one with all)."""
    url = postgres_server.create_database()
    dbname = urllib.parse.urlsplit(url).path.lstrip("/")
    logins = {
        d: Login(f"{postgres_server.prefix}u{i}{d}x", f"{MARK}{i}a{d}{MARK}{i}b")
        for i, d in enumerate(DELIMITERS)
    }
    every = "".join(DELIMITERS)
    logins["all"] = Login(f"{postgres_server.prefix}all{every}x", f"{MARK}{every}{MARK}")
    for login in logins.values():
        postgres_server.create_login(login.user, login.password)
    corpus = Corpus(postgres_server, dbname, logins)
    try:
        assert refine(corpus.url(logins["all"]), "init").returncode == 0
        yield corpus
    finally:
        postgres_server.drop_database(url)
        for login in logins.values():
            postgres_server.drop_login(login.user)


def refine(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a subprocess, the journal given by --journal (argv: our own process)."""
    return subprocess.run(
        [PY, "-m", "refine_tui.cli", "--journal", url, "--node", "n1", *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def never_shown(*texts: str) -> None:
    leaks = [text for text in texts if MARK.lower() in text.lower()]
    assert not leaks, leaks


def assert_outcome(done: subprocess.CompletedProcess[str], code: int) -> None:
    never_shown(done.stdout, done.stderr)
    assert done.returncode == code, (done.stdout, done.stderr)
    if code:
        kind = {2: "INVALID_INPUT", 3: "STORAGE"}[code]
        assert done.stderr.startswith(f"refine: {kind}: ") and done.stderr.count("\n") == 1


def init_everywhere(url: str, code: int) -> None:
    """`refine init` with --json and without: stdout, stderr and the exit code."""
    as_json = refine(url, "--json", "init")
    assert_outcome(as_json, code)
    if code == 0:
        shown = json.loads(as_json.stdout)["journal"]
        assert shown == redact(url) and shown.startswith("postgresql://")
        as_text = refine(url, "init")
        assert_outcome(as_text, 0)
        assert as_text.stdout == f"journal ready: {shown}\n"


# --- item 1's reports, as the outside suite wrote them -----------------------------------------


def test_a_hash_in_the_password_is_never_printed_by_init(corpus: Corpus) -> None:
    """Regression: `journal ready: postgresql://hashuser:pa#TOPSECRETHASH1@127.0.0.1:…` (the
    password after '#' was read as a fragment and the user info kept whole)."""
    init_everywhere(corpus.raw_url("#", "password-in-userinfo"), 0)


def test_an_at_in_the_password_is_refused_without_printing_its_tail(corpus: Corpus) -> None:
    """Regression: `failed to resolve host 'TOPSECRETTAIL9@127.0.0.1'` (libpq reads the user
    info up to the first '@', the redaction cut at the last)."""
    init_everywhere(corpus.raw_url("@", "password-in-userinfo"), 2)


# --- the corpus: the CLI ---------------------------------------------------------------------


@pytest.mark.parametrize("delimiter", DELIMITERS)
def test_percent_encoded_logins_work_and_never_show(corpus: Corpus, delimiter: str) -> None:
    login = corpus.logins[delimiter]
    init_everywhere(corpus.url(login), 0)
    user, password = (urllib.parse.quote(text, safe="") for text in (login.user, login.password))
    host = corpus.server.url_with_userinfo(corpus.dbname, "")  # the query form
    init_everywhere(f"{host}?user={user}&password={password}", 0)


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("delimiter", DELIMITERS)
def test_raw_delimiters_work_or_are_refused_and_never_show(
    corpus: Corpus, delimiter: str, placement: str
) -> None:
    init_everywhere(
        corpus.raw_url(delimiter, placement), RAW_EXIT[delimiter][PLACEMENTS.index(placement)]
    )


@pytest.mark.parametrize("delimiter", DELIMITERS)
def test_a_wrong_password_is_refused_and_neither_password_shows(
    corpus: Corpus, delimiter: str
) -> None:
    login = corpus.logins[delimiter]
    init_everywhere(corpus.url(login, password=f"{MARK}wrong{delimiter}{MARK}"), 3)
    user = urllib.parse.quote(login.user, safe="")
    wrong = urllib.parse.quote(f"{MARK}wrong{delimiter}{MARK}", safe="")
    init_everywhere(corpus.server.url_with_userinfo(corpus.dbname, user, f"password={wrong}"), 3)


def test_urls_that_cannot_connect_never_show_the_password(corpus: Corpus) -> None:
    everything = corpus.url(corpus.logins["all"])
    hostport = urllib.parse.urlsplit(corpus.server.base_url).netloc.rsplit("@", 1)[-1]
    host = hostport.rsplit(":", 1)[0]
    for url, code in [
        (everything.replace(hostport, f"{host}:notaport"), 2),
        (everything.replace(hostport, f"{host}:99999"), 2),
        (everything.replace(hostport, f"{host}:1"), 3),  # nothing listens there
        (everything.replace(f"/{corpus.dbname}", "/no_such_database"), 3),
        (everything + "?sslmode=require", 3),  # the test server has no TLS
        (everything + "?no_such_option=1", 2),
        (everything + f"?application_name={MARK}&{MARK}", 2),
    ]:
        init_everywhere(url, code)


def test_goals_copy_and_serve_never_show_the_password(corpus: Corpus, tmp_path: Path) -> None:
    url = corpus.url(corpus.logins["all"])
    added = refine(url, "--json", "goal", "add", "--title", "t", "--", "true")
    assert_outcome(added, 0)
    assert_outcome(refine(url, "--json", "goals"), 0)
    assert_outcome(refine(url, "check"), 0)

    source = tmp_path / "source.db"
    assert_outcome(refine(str(source), "init"), 0)
    assert_outcome(refine(str(source), "goal", "add", "--title", "t", "--", "true"), 0)
    target = f"{url}?schema=copied"
    copied = refine(str(source), "--json", "copy", str(source), target)
    assert_outcome(copied, 0)
    assert json.loads(copied.stdout)["target"] == redact(target)
    refused = corpus.raw_url("@", "password-in-userinfo") + "&schema=copied_b"
    assert_outcome(refine(str(source), "copy", str(source), refused), 2)

    assert_outcome(refine(corpus.raw_url("/", "password-in-userinfo"), "serve"), 2)
    serving = subprocess.Popen(
        [PY, "-m", "refine_tui.cli", "--journal", url, "--node", "n1", "serve", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert serving.stdout is not None
        announced = [serving.stdout.readline() for _ in range(3)]
        assert "refine serve: the dashboard" in announced[0], announced
    finally:
        serving.send_signal(signal.SIGTERM)
        out, err = serving.communicate(timeout=30)
    never_shown(*announced, out, err)


# --- the corpus: the dashboard ---------------------------------------------------------------


async def dashboard_shows(url: str, states: tuple[str, ...]) -> str:
    """The header's texts and the whole screen once the dashboard reached one of ``states``."""
    app = RefineApp(journal=url, node="n1")
    async with app.run_test(size=(160, 30)) as pilot:
        await until(pilot, lambda: app.header_state.state in states, timeout=30)
        await pilot.pause()
        header = app.header_state
        return "\n".join([header.journal, header.detail, app.export_screenshot()])


async def test_the_dashboard_header_shows_the_url_without_its_password(corpus: Corpus) -> None:
    url = corpus.url(corpus.logins["all"])
    shown = await dashboard_shows(url, ("live",))
    never_shown(shown)
    assert redact(url) in shown.split("\n")[0]


@pytest.mark.parametrize(
    "placement",
    ["password-in-userinfo", "password-in-query", "user-in-userinfo", "wrong-password"],
)
async def test_the_dashboard_on_a_refused_url_says_why_without_the_password(
    corpus: Corpus, placement: str
) -> None:
    if placement == "wrong-password":
        url, why = corpus.url(corpus.logins["all"], password=f"{MARK}wrong{MARK}"), "password"
    else:  # every delimiter raw: refused as input
        url, why = corpus.raw_url("all", placement), "not a usable journal URL"
    shown = await dashboard_shows(url, ("broken", "reconnecting", "missing"))
    never_shown(shown)
    assert why in shown.split("\n")[1]  # the header says why


# --- the corpus: a node, its workers and their logs -------------------------------------------


def test_a_node_and_its_workers_never_carry_the_password_in_argv_or_logs(
    corpus: Corpus, tmp_path: Path
) -> None:
    url = corpus.url(corpus.logins["all"], query="schema=nodes")
    state = tmp_path / "state"
    started = tmp_path / "started"
    recipe = "import pathlib, sys, time; pathlib.Path(sys.argv[1]).touch(); time.sleep(120)"
    assert_outcome(refine(url, "init"), 0)
    assert_outcome(
        refine(url, "goal", "add", "--title", "long", "--", PY, "-c", recipe, str(started)), 0
    )
    log = tmp_path / "node.out"
    with open(log, "wb") as out:
        # The node is given the URL in its own argv (the operator's choice); nothing it starts is.
        node = subprocess.Popen(
            [PY, "-m", "refine_tui.cli", "--journal", url, "--node", "n1", "--state-dir",
             str(state), "node"],
            stdout=out, stderr=out, start_new_session=True,
        )  # fmt: skip
    recipe_proc: list[psutil.Process] = []
    try:
        wait_until(started.exists, timeout=60, what="the recipe started")
        descendants = psutil.Process(node.pid).children(recursive=True)
        argvs = {proc.pid: argv_of(proc) for proc in descendants}
        recipe_proc = [p for p in descendants if str(started) in argvs[p.pid]]
        assert recipe_proc, argvs
        assert any("store.worker" in argv for argv in argvs.values()), argvs
        never_shown(*(" ".join(argv) for argv in argvs.values()))
    finally:
        node.send_signal(signal.SIGTERM)
        node.wait(timeout=30)
        for proc in recipe_proc:
            with contextlib.suppress(ProcessLookupError, psutil.Error):
                os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
    logs = [p.read_text(errors="replace") for p in [log, *state.rglob("*")] if p.is_file()]
    assert len(logs) > 1
    never_shown(*logs)


def argv_of(proc: psutil.Process) -> list[str]:
    with contextlib.suppress(psutil.Error):  # it may have ended since it was found
        return proc.cmdline()
    return []


# --- the URL read as libpq reads it ------------------------------------------------------------


def libpq_reads(url: str) -> dict[str, str] | None:
    """What libpq itself makes of ``url`` (None when it refuses it, or psycopg cannot say)."""
    try:
        return conninfo_to_dict(url)
    except (psycopg.ProgrammingError, UnicodeDecodeError):  # %FF: not UTF-8, which we refuse
        return None


def ours(url: str) -> dict[str, str] | None:
    """What libpq makes of the options we read from ``url`` (None when refused)."""
    try:
        return conninfo_to_dict(make_conninfo("", **parse_url(url).libpq_options()))
    except (InvalidInputError, psycopg.ProgrammingError):
        return None


HAND_WRITTEN = [
    "postgresql://u:pa#ss@h/db",
    "postgresql://u:pa?ss@h/db?sslmode=disable",
    "postgresql://u:pa:ss@h:5432/db",
    "postgresql://u:pa%20ss@h/db",
    "postgresql:// u:pass @ h,h2 :5 / db ?sslmode= disable",
    "postgresql://u:pa%40ss@h/db",
    "postgresql://u%3Ax:p@h/db",
    "postgresql://u#x:p@h/db",
    "postgresql://:p@h/db",
    "postgresql://u:@h/db",
    "postgresql://h/db?password=pa#ss&user=u%26v",
    "postgresql://h/db?password=pa/ss?x:y",
    "postgresql://h/db?password=pa+ss",
    "postgresql:///db",
    "postgresql://",
    "postgres://h",
    "postgresql://h/",
    "postgresql://h?",
    "postgresql://h1,h2:5433,[::1]:5434/db",
    "postgresql://[fe80::1%25eth0]/db",
    "postgresql://%2Fvar%2Frun%2Fpostgresql/db",
    "postgresql://u@:5432/db?host=/tmp",
    "postgresql://h/d%2Fb%3F",
    "postgresql://h/db?ssl=true",
    "postgresql://h/db?requiressl=1",
    "postgresql://h/db?sslpassword=pa%26ss&application_name=x",
]


@pytest.mark.parametrize("url", HAND_WRITTEN)
def test_urls_are_read_as_libpq_reads_them(url: str) -> None:
    assert ours(url) == libpq_reads(url) is not None
    shown_as_read_back(parse_url(url))


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:pa@ss@h/db",  # libpq: password "pa", host "ss@h"
        "postgresql://u:pa/ss@h/db",  # libpq: host "u", port "pa", database "ss@h/db"
        "postgresql://u/x@h/db",  # libpq: host "u", database "x@h/db"
        "postgresql://h/db?password=pa@ss",
        "postgresql://h:notaport/db",
        "postgresql://h:99999/db",
        "postgresql://h:0/db",
        "postgresql://h/db?port=5432x",
    ],
)
def test_urls_libpq_would_misread_or_refuse_late_are_refused_now(url: str) -> None:
    assert libpq_reads(url) is not None  # libpq takes them (and fails later, or connects wrong)
    with pytest.raises(InvalidInputError) as refused:
        parse_url(url)
    assert not {"pa", "ss", "notaport", "99999", "5432x"} & set(str(refused.value).split())
    assert redact(url) == "postgresql://(unparsable URL)"


SECRETS = {"password", "sslpassword", "oauth_client_secret", "scram_client_key", "scram_server_key"}


def shown_as_read_back(read: JournalURL) -> None:
    """The printable form connects where the URL does, without a password or a secret option."""
    back = parse_url(read.shown())
    public = {name: value for name, value in read.libpq_options().items() if name not in SECRETS}
    assert back.libpq_options() == public and back.schema == read.schema


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:pa ss@h/db",
        "postgresql://u:pa%zz@h/db",
        "postgresql://u:pa%00@h/db",
        "postgresql://h/db?password=pa=ss",
        "postgresql://h/db?password=pa&ss",
        "postgresql://h/db?pa=ss",
        "postgresql://h/db?&",
        "postgresql://[::1/db",
        "postgresql://[]/db",
        "postgresql://[::1]x/db",
        "postgresql://h1 ,h2/db",
    ],
)
def test_urls_libpq_refuses_are_refused_without_quoting_them(url: str) -> None:
    assert libpq_reads(url) is None
    with pytest.raises(InvalidInputError) as refused:
        connection_info(url)
    assert not {"pa", "ss", "pa=ss", "h1", "::1"} & set(str(refused.value).split())


# Every delimiter libpq knows, letters, and percent-encoded forms (valid and not).
_PIECES = st.sampled_from(
    ["@", ":", "/", "?", "#", "&", "=", ",", "[", "]", " ", "%", "+", "a", "b", "1", "5432",
     "%40", "%2F", "%3A", "%23", "%25", "%00", "%zz", "%C3%A9", "é", "host", "user", "password",
     "sslmode", "disable", "application_name"]
)  # fmt: skip


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(_PIECES, max_size=16).map("".join), st.sampled_from(["postgresql://", "postgres://"])
)
def test_generated_urls_are_read_as_libpq_reads_them_or_refused_for_a_reason(
    tail: str, scheme: str
) -> None:
    url = scheme + tail
    libpq = libpq_reads(url)
    try:
        read = parse_url(url)
    except InvalidInputError as refused:
        why = str(refused)
        if libpq is None:
            return
        if "a port must be" in why:  # libpq takes it, and fails when connecting
            assert any(not is_port(port) for port in libpq["port"].split(",") if port), url
        elif "only spaces" in why:  # libpq sets an empty value rather than none
            assert "" in libpq.values(), url
        elif "not UTF-8" in why:  # libpq drops it here (requiressl=%FF is sslmode=prefer)
            assert "%" in url, url
        else:  # an '@' that does not end the user info: libpq reads it as part of a value
            assert "an '@' after" in why, (url, why)
            assert url.count("@") > 1 or "/" in tail.partition("@")[0], url
        return
    assert ours(url) == libpq, url
    if libpq is not None:  # every option is libpq's: the printable form shows all but secrets
        shown_as_read_back(read)


def is_port(text: str) -> bool:
    return text.isdigit() and 1 <= int(text) <= 65535
