"""What every journal backend shares: the records, and a command's decision from replay to rows.

A backend opens its transaction, offers the few storage steps of :class:`CommandTx` inside it and
calls :func:`run_command`; so the refusal order, replay and conflict rules, version checks and
the receipt text are written once, and SQLite and PostgreSQL cannot drift apart.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any, Protocol

from store.canonical import canonical_json
from store.errors import (
    CommandConflictError,
    DecisionError,
    InvalidInputError,
    RefineError,
    StorageError,
    VersionConflictError,
)
from store.records import dataclass
from store.speedups.json_scan import loads as loads  # json.loads, faster

MAX_SAFE_INTEGER = 2**53 - 1
MAX_PAGE = 1000


@dataclass(frozen=True)
class Event:
    sequence: int
    aggregate_id: str
    version: int
    type: str
    data: Mapping[str, Any]
    committed_at: float


# An event as stored, its data text unparsed: (sequence, aggregate_id, version, type, data,
# committed_at, command_id). Readers of many events parse only what they need (``event_row``
# makes the ``Event`` of its first six).
EventRecord = tuple[int, str, int, str, str, float, str]


@dataclass(frozen=True)
class Stored:
    """An aggregate's stored state as parsed JSON (never validated here) and its version."""

    aggregate_id: str
    version: int
    state: Any
    # The JSON text ``state`` was parsed from, when read from a row (None otherwise): a model
    # need not validate again a text it has already seen pass (``run_model.check_stored_run``).
    text: str | None = None
    # Its last commit's sequence, when read newest first (None otherwise): with the id, where
    # the next page of a newest-first listing begins (``aggregates(before=...)``).
    last_sequence: int | None = None

    @property
    def recency(self) -> tuple[int, str]:
        """Where this row stands newest first: ``aggregates(before=...)`` pages on from it."""
        if self.last_sequence is None:
            raise ValueError("only a row read newest first knows its recency")
        return (self.last_sequence, self.aggregate_id)


@dataclass(frozen=True)
class Change:
    """What a decision writes for one aggregate: its whole new state and the events saying why."""

    aggregate_id: str
    state: Mapping[str, Any]
    events: Sequence[tuple[str, Mapping[str, Any]]]
    # True when ``state`` is the fold (``FOLDS[kind]``) of the aggregate's events: the receipt
    # then keeps only the version, and a replay re-derives the state from the events.
    folded: bool = False
    # ``canonical_json(state)`` when the decision already has it: a model's own encoder for a
    # record its rules just checked (proven byte-identical over a hypothesis corpus).
    text: str | None = None


@dataclass(frozen=True)
class Outcome:
    """A command's result: the changed aggregates as the command left them."""

    replayed: bool
    states: Mapping[str, Stored]
    events: tuple[Event, ...]


Decide = Callable[[Mapping[str, Stored | None]], Sequence[Change]]


@dataclass(frozen=True)
class Command:
    """One command of a batch (``Journal.execute_batch``): what ``Journal.execute`` takes."""

    command_id: str
    payload: Mapping[str, Any]
    expected: Mapping[str, int | None]
    decide: Decide


# An aggregate kind's fold: its events (oldest first) → the state they imply. Registered by the
# models (run_model, goal_model); a replay uses it to rebuild a compact receipt's state.
Fold = Callable[[list[Event]], Any]
FOLDS: dict[str, Fold] = {}


def register_fold(kind: str, fold: Fold) -> None:
    FOLDS[kind] = fold


@dataclass(frozen=True)
class AggregateRow:
    """One aggregate as a command writes it (``new``: INSERT, else UPDATE)."""

    aggregate_id: str
    kind: str
    version: int
    status: str | None
    node_id: str | None
    last_sequence: int
    state: str
    new: bool


@dataclass(frozen=True)
class Writes:
    """Everything a decided command writes, known before any sequence is: its events
    ``(aggregate_id, version, type, data text)`` in order, its aggregate rows and its receipt.
    ``last_events[i]`` is the 1-based position in ``events`` of ``rows[i]``'s last event (0: none);
    the backend stores that event's sequence as the row's ``last_sequence``."""

    command_id: str
    key: str
    result: str
    now: float
    events: list[tuple[str, int, str, str]]
    rows: list[AggregateRow]
    last_events: list[int]


class CommandTx(Protocol):
    """The storage steps of one command, inside the backend's open write transaction."""

    def load(self, aggregate_ids: Sequence[str]) -> dict[str, Stored | None]:
        """The aggregates, locked against other writers until commit (absent ones: None)."""

    def receipt(self, command_id: str) -> tuple[str, str] | None:
        """The receipt's ``(payload digest, result text)`` of an earlier command with this id."""

    def events_of(self, aggregate_id: str, up_to_version: int) -> list[Event]:
        """One aggregate's events up to ``up_to_version``, oldest first."""

    def write(self, writes: Writes) -> list[int]:
        """Insert the events (the outbox is a view of them), put the rows, add the receipt;
        returns the events' sequences (gap-free, in commit order)."""


class StepTx(Protocol):
    """A backend that writes a command in steps (:func:`write_steps`)."""

    def append(
        self, events: Sequence[tuple[str, int, str, str]], now: float, command_id: str
    ) -> list[int]:
        """Insert events ``(aggregate_id, version, type, data text)``; returns their sequences
        (gap-free, in commit order)."""

    def put(self, row: AggregateRow) -> None: ...

    def add_receipt(self, command_id: str, key: str, result: str, now: float) -> None: ...


def write_steps(tx: StepTx, writes: Writes) -> list[int]:
    """``CommandTx.write`` as events, then each row (its last event's sequence filled in), then
    the receipt."""
    sequences = tx.append(writes.events, writes.now, writes.command_id)
    for row, last in zip(writes.rows, writes.last_events, strict=True):
        if last:  # built directly: records.replace reads every field by name (≈ 2 µs a row)
            row = AggregateRow(
                row.aggregate_id, row.kind, row.version, row.status, row.node_id,
                sequences[last - 1], row.state, row.new,
            )  # fmt: skip
        tx.put(row)
    tx.add_receipt(writes.command_id, writes.key, writes.result, writes.now)
    return sequences


def command_key(payload: Mapping[str, Any], expected: Mapping[str, int | None]) -> str:
    """What two uses of one command id must share to be the same command: the digest of the
    canonical text of payload and expected versions (a receipt stores this digest)."""
    return key_digest(canonical_json({"payload": payload, "expected": dict(expected)}))


def key_digest(text: str) -> str:
    """128 bits of SHA-256 in hex (PostgreSQL's migration computes the same with ``sha256``)."""
    from store.speedups.sha256 import sha256  # here: a read never hashes, nor imports it

    return sha256(text.encode()).hexdigest()[:32]


def run_command(
    tx: CommandTx,
    command_id: str,
    key: str,
    expected: Mapping[str, int | None],
    decide: Decide,
) -> Outcome:
    """Replay or refuse or decide and write. Refusal order: replay or CommandConflictError, then
    VersionConflictError, then the decision's own errors. The aggregates are loaded (and locked)
    before the receipt is read, so a command that waited for a lock sees the receipt of the
    command it waited for."""
    loaded = tx.load(sorted(expected))
    receipt = tx.receipt(command_id)
    if receipt is not None:
        if receipt[0] != key:
            raise CommandConflictError(
                f"command {command_id} was already used for a different command",
                **first_ids(expected),
            )
        return Outcome(replayed=True, states=_replayed(tx, loaded, receipt[1]), events=())
    for agg, version in expected.items():
        found = loaded[agg]
        actual = found.version if found is not None else 0
        if version is not None and actual != version:
            raise VersionConflictError(
                f"{agg} is at version {actual}, not {version}", **ids_for(agg)
            )
    try:
        changes = list(decide(loaded))
    except RefineError:
        raise
    except Exception as exc:
        raise DecisionError(f"decision failed: {exc}", **first_ids(expected)) from exc
    if not changes or any(c.aggregate_id not in expected for c in changes):
        raise DecisionError("a command must change only the aggregates it read")
    return _write(tx, command_id, key, loaded, changes)


def run_batched(tx: CommandTx, command: Command, key: str) -> Outcome | RefineError:
    """``run_command`` for one command of a batch: its refusal is returned, for the caller to
    roll back to the command's savepoint; a StorageError still fails the whole batch."""
    try:
        return run_command(tx, command.command_id, key, command.expected, command.decide)
    except StorageError:
        raise
    except RefineError as exc:
        return exc


def _write(
    tx: CommandTx,
    command_id: str,
    key: str,
    loaded: Mapping[str, Stored | None],
    changes: Sequence[Change],
) -> Outcome:
    now = time.time()
    versions = {}
    rows = []
    datas = []
    for change in changes:
        before = loaded[change.aggregate_id]
        versions[change.aggregate_id] = (before.version if before is not None else 0) + 1
        for type_, data in change.events:
            rows.append(
                (change.aggregate_id, versions[change.aggregate_id], type_, canonical_json(data))
            )
            datas.append(dict(data))
    last_of = {row[0]: position for position, row in enumerate(rows, 1)}
    states: dict[str, Stored] = {}
    puts: list[AggregateRow] = []
    entries: list[tuple[str, str]] = []
    for change in changes:
        agg, version = change.aggregate_id, versions[change.aggregate_id]
        state_text = change.text if change.text is not None else canonical_json(change.state)
        puts.append(
            AggregateRow(
                agg,
                aggregate_kind(agg),
                version,
                text_field(change.state, "status"),
                text_field(change.state, "node_id"),
                0,
                state_text,
                loaded[agg] is None,
            )
        )
        # The state as decided is the state written (canonical JSON round-trips plain data).
        states[agg] = Stored(agg, version, change.state)
        # A folded state is rebuilt from the events on replay: the receipt keeps its version.
        entry = str(version) if change.folded else f'{{"state":{state_text},"version":{version}}}'
        entries.append((agg, entry))
    # encode_basestring: json.dumps(agg, ensure_ascii=False) without its per-call set-up
    result = ",".join(f"{encode_basestring(agg)}:{e}" for agg, e in sorted(entries))
    writes = Writes(
        command_id, key, "{" + result + "}", now, rows, puts,
        [last_of.get(row.aggregate_id, 0) for row in puts],
    )  # fmt: skip
    sequences = tx.write(writes)
    events = tuple(
        Event(seq, agg, version, type_, data, now)
        for seq, (agg, version, type_, _), data in zip(sequences, rows, datas, strict=True)
    )
    return Outcome(replayed=False, states=states, events=events)


# --- small shared helpers --------------------------------------------------------------------


def aggregate_kind(aggregate_id: str) -> str:
    return aggregate_id.split(":", 1)[0]


def ids_for(aggregate_id: str) -> dict[str, str | None]:
    kind, _, key = aggregate_id.partition(":")
    return {"run_id": key if kind == "run" else None, "goal_id": key if kind == "goal" else None}


def first_ids(expected: Mapping[str, int | None]) -> dict[str, str | None]:
    ids: dict[str, str | None] = {"run_id": None, "goal_id": None}
    for agg in expected:
        for name, value in ids_for(agg).items():
            if ids[name] is None:
                ids[name] = value
    return ids


def check_page(after_sequence: Any, limit: Any) -> None:
    if (
        isinstance(after_sequence, bool)
        or not isinstance(after_sequence, int)
        or not 0 <= after_sequence <= MAX_SAFE_INTEGER
    ):
        raise InvalidInputError("after_sequence must be an integer from 0")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidInputError(f"limit must be an integer from 1 to {MAX_PAGE}")


def text_field(state: Mapping[str, Any], name: str) -> str | None:
    value = state.get(name) if type(state) is dict or isinstance(state, Mapping) else None
    return value if isinstance(value, str) else None


def linked_id(stored: Stored, field: str, prefix: str) -> str | None:
    """The aggregate a stored state's text ``field`` names, as ``prefix + value`` (or None)."""
    value = text_field(stored.state, field)
    return None if value is None else prefix + value


def fields_of(text: Any, names: Sequence[str]) -> tuple[Any, ...]:
    """The named top-level fields of a stored state's text, parsed here (None where absent, or
    where the text is not a JSON object): what ``Journal.state_fields`` reads in the database."""
    try:
        state = loads(text)
    except ValueError:
        state = None
    if type(state) is not dict:
        return (None,) * len(names)
    return tuple(state.get(name) for name in names)


def stored_row(row: Sequence[Any]) -> Stored:
    """``(aggregate_id, version, state text[, last_sequence])`` → Stored; text that is not JSON
    stays Unreadable."""
    text = row[2]
    last = int(row[3]) if len(row) > 3 else None  # a newest-first read's fourth column
    try:
        state = loads(text)
    except ValueError:
        return Stored(str(row[0]), int(row[1]), Unreadable(text), None, last)
    return Stored(str(row[0]), int(row[1]), state, text if type(text) is str else None, last)


def event_row(row: Sequence[Any]) -> Event:
    """A stored event; data that is not a JSON object becomes UnreadableData (never a crash)."""
    try:
        data = loads(row[4])
    except ValueError:
        data = None
    if type(data) is not dict:
        data = UnreadableData(row[4])
    return Event(int(row[0]), str(row[1]), int(row[2]), str(row[3]), data, row[5])


def parse_result(text: str) -> dict[str, Any]:
    """A receipt's result: per aggregate its version (compact) or ``{"state", "version"}``."""
    result = json.loads(text)
    if not isinstance(result, dict):
        raise ValueError("a receipt's result is not an object")
    return result


def _replayed(tx: CommandTx, loaded: Mapping[str, Stored | None], text: str) -> dict[str, Stored]:
    """The states a receipt's command left: stored whole, or (compact) the aggregate's current
    state when it is still at that version, else the fold of its events up to that version."""
    states = {}
    for agg, entry in parse_result(text).items():
        if isinstance(entry, dict):
            states[agg] = Stored(agg, int(entry["version"]), entry["state"])
            continue
        version, now = int(entry), loaded.get(agg)
        if now is not None and now.version == version:
            states[agg] = now
        else:
            states[agg] = Stored(agg, version, _fold(agg, tx.events_of(agg, version)))
    return states


def _fold(aggregate_id: str, events: list[Event]) -> Any:
    """The fold of these events; events that do not fold stay Unreadable (the caller's
    validation refuses them as a corrupt record)."""
    fold = FOLDS.get(aggregate_kind(aggregate_id))
    try:
        if fold is None:
            raise ValueError(f"no fold for {aggregate_id}")
        return fold(events)
    except (RefineError, ValueError, KeyError, TypeError) as exc:
        return Unreadable(f"receipt state does not fold: {exc}")


class Unreadable(str):
    """Stored text that is not JSON: validators treat it as a corrupt record."""


class UnreadableData(dict[str, str]):
    """A stored event's data that is not a JSON object, kept as its text under ``unreadable``:
    every reader can still show the event, folds find none of their fields, and `refine check`
    reports it."""

    def __init__(self, text: Any) -> None:
        super().__init__(unreadable=str(text))


# --- copying a journal between backends (``refine copy``) ------------------------------------

# Every table a copy carries with its columns in one order for every backend, and its key order;
# events come before the outbox rows that name them. The outbox is a view of the events on both
# backends: a target checks the rows it is given against its own view. SQLite's ``prev`` (each
# event's previous one of its aggregate) is derived, not copied.
COPY_TABLES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("events", ("sequence", "aggregate_id", "version", "type", "data", "committed_at",
                "command_id"), "sequence"),
    ("outbox", ("sequence", "aggregate_id", "topic", "published"), "sequence"),
    ("aggregates", ("aggregate_id", "kind", "version", "status", "node_id", "last_sequence",
                    "state"), "aggregate_id"),
    ("receipts", ("command_id", "payload", "result", "committed_at"), "command_id"),
)  # fmt: skip
COPY_BATCH = 1000


def copy_table(table: str) -> tuple[tuple[str, ...], str]:
    """A stored table's columns and key, by name (any other name is refused)."""
    for name, columns, key in COPY_TABLES:
        if name == table:
            return columns, key
    raise InvalidInputError(f"no such journal table: {table}")
