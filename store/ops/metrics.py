"""The journal's figures for Prometheus (DESIGN §16), read at each scrape.

``JournalCollector`` is a prometheus-client collector over one journal. Per scrape it asks the
backend's change gate whether anything committed (one cheap read); only then does it read, in
one snapshot, the events after the last sequence it folded (an index range: ``JournalStats``)
and the Goals still moving per status (one GROUP BY over their small index; a terminal status is
for good, so the events count those). Nothing reads all the events
or all the records again, whatever the journal's size. Names follow Prometheus' conventions:
the ``refine_`` prefix, base units (seconds), ``_total`` counters, no goal/run/attempt ids as
labels (a label per node and per outcome or status only).

``exposition`` answers a scrape in the format its ``Accept`` asks for: the Prometheus text
format, or OpenMetrics.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from store.errors import JournalClosedError, RefineError
from store.journal.api import MAX_PAGE, ChangeSource, Journal, JournalHandle, Location
from store.journal.locations import JournalLocation
from store.model.goals import REASSIGNABLE
from store.ops.journal_stats import (
    FOLDED,
    OUTCOMES,
    Histogram,
    JournalStats,
    node_presence,
)
from store.statuses import ACTIVE_GOAL_STATUSES, GOAL_STATUSES

PREFIX = "refine"
FOLDED_TYPES = sorted(FOLDED)
TEXT = "text/plain; charset=utf-8"
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # shown as escapes in a 503's one line


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("refine-tui")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


class JournalCollector(Collector):
    """The metrics of the journal at ``location``, read-only. Safe to call from several threads
    (scrapes are serialized). ``collect`` raises a StorageError while the journal is unusable."""

    def __init__(self, location: Location, *, clock: Callable[[], float] = time.time) -> None:
        self.location = JournalLocation.of(location)
        self._clock = clock
        self._handle = JournalHandle(self.location, read_only=True)
        self._lock = threading.Lock()
        self._closed = False
        self._journal: Journal | None = None
        self._changes: ChangeSource | None = None
        self._unread = True  # read whatever the gate says (first scrape, after a failure)
        self.stats = JournalStats()
        self.goals: Counter[str] = Counter()  # status → Goals
        self.nodes: set[str] = set()  # nodes of attempts and of the Goals still moving
        self.waiting: Counter[str] = Counter()  # node → its Goals queued or held
        self._version = version()

    @property
    def journal(self) -> Journal | None:
        """The journal the last scrape read (None before the first)."""
        return self._journal

    def describe(self) -> list[Metric]:
        return []  # registering must not read the journal

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            self.refresh()
            families = self._families()
        yield from families

    def close(self) -> None:
        """Close the journal; a scrape from now on is refused (JournalClosedError), never a
        reopening (a request still in flight as the exporter stops)."""
        with self._lock:
            self._closed = True
            self._handle.close()
            self._journal = self._changes = None

    # --- reading --------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Fold what committed since the last scrape (nothing at all when nothing did)."""
        if self._closed:
            raise JournalClosedError("the exporter is stopping: its journal is closed")
        journal = self._handle.get()
        if journal is not self._journal:
            self._switch(journal)
        assert self._changes is not None
        if not (self._changes.changed() or self._unread):
            return
        self._unread = True
        stats = self.stats
        with journal.snapshot():  # the events and the moving Goals at one sequence
            while True:
                page = journal.event_records(stats.sequence, MAX_PAGE, FOLDED_TYPES)
                stats.fold(page)
                if len(page) < MAX_PAGE:
                    break
            stats.sequence = journal.last_sequence()  # the types not folded end the range
            moving = journal.count_by_status_and_node("goal", ACTIVE_GOAL_STATUSES)
        goals: Counter[str] = Counter(stats.terminal_goals)
        waiting: Counter[str] = Counter()
        for (status, node), count in moving.items():
            goals[str(status)] += count
            if status in REASSIGNABLE and node:
                waiting[str(node)] += count
        self.goals, self.waiting = goals, waiting
        self.nodes = stats.nodes | {str(node) for _, node in moving if node}
        self._unread = False

    def _switch(self, journal: Journal) -> None:
        """A (re)opened journal: the same one resumes its fold; another (a SQLite file replaced
        by a different or an older journal) is folded from its start, so counters reset as
        Prometheus expects of a restarted target."""
        previous = self._journal
        same = (
            previous is not None
            and journal.journal_id is not None
            and journal.journal_id == previous.journal_id
            and journal.last_sequence() >= self.stats.sequence
        )
        if not same:
            self.stats = JournalStats()
        self._journal, self._changes, self._unread = journal, journal.changes(), True

    # --- the families ---------------------------------------------------------------------------

    def _families(self) -> list[Metric]:
        stats = self.stats
        goals = GaugeMetricFamily(
            f"{PREFIX}_goals", "Goals by status, as `refine goals` lists them.", labels=["status"]
        )
        for status in GOAL_STATUSES:
            goals.add_metric([status], self.goals.get(status, 0))
        running = GaugeMetricFamily(
            f"{PREFIX}_attempts_running",
            "Attempts running now, by the node of their worker.",
            labels=["node"],
        )
        finished = CounterMetricFamily(
            f"{PREFIX}_attempts_finished",
            "Attempts that ended, by node and outcome (completed, failed, interrupted).",
            labels=["node", "outcome"],
        )
        waiting = GaugeMetricFamily(
            f"{PREFIX}_goals_waiting",
            "Goals queued or held on the node: only it starts them (refine nodes' waiting).",
            labels=["node"],
        )
        for node in sorted(self.nodes):
            running.add_metric([node], stats.running_count[node])
            for outcome in OUTCOMES:
                finished.add_metric([node, outcome], stats.finished[(node, outcome)])
            waiting.add_metric([node], self.waiting[node])
        return [
            goals,
            running,
            finished,
            waiting,
            _histogram(
                "attempt_duration_seconds",
                "Attempts that ended: from claim to ending (commit times).",
                stats.durations,
            ),
            _histogram(
                "queue_wait_seconds",
                "Claims: how long their run waited to be claimed since it became claimable.",
                stats.queue_waits,
            ),
            *self._node_families(),
            GaugeMetricFamily(
                f"{PREFIX}_cleanup_pending",
                "Running attempts whose run's cancellation waits for their cleanup.",
                value=stats.cleanup_pending(),
            ),
            GaugeMetricFamily(
                f"{PREFIX}_journal_last_sequence",
                "The sequence of the last event these figures include.",
                value=stats.sequence,
            ),
            InfoMetricFamily(
                f"{PREFIX}_build", "The refine version serving these metrics.",
                value={"version": self._version},
            ),
        ]  # fmt: skip

    def _node_families(self) -> list[Metric]:
        up = GaugeMetricFamily(
            f"{PREFIX}_node_up",
            "1 while the node's heartbeat is live (refine nodes), else 0.",
            labels=["node"],
        )
        seen = GaugeMetricFamily(
            f"{PREFIX}_node_last_seen_timestamp_seconds",
            "The node's last heartbeat (else its last act in the journal), Unix time.",
            labels=["node"],
        )
        journal = self._handle.get()
        now, beats = journal.presence()  # a small table, read on every scrape: beats commit nothing
        presence = node_presence(self.nodes, self.stats, beats, now)
        for node, (is_up, last) in sorted(presence.items()):
            up.add_metric([node], 1 if is_up else 0)
            if last is not None:
                seen.add_metric([node], last)
        return [up, seen]


def _histogram(name: str, text: str, histogram: Histogram) -> HistogramMetricFamily:
    return HistogramMetricFamily(
        f"{PREFIX}_{name}", text, buckets=histogram.cumulative(), sum_value=histogram.sum
    )


def exposition(collector: Collector, accept: str | None) -> tuple[bytes, str]:
    """The scrape's body and its ``Content-Type``, in the format ``accept`` prefers."""
    encode, content_type = choose_encoder(accept or "")
    return encode(collector), content_type


def scrape(collector: Collector, accept: str | None) -> tuple[int, bytes, str]:
    """An HTTP answer to a scrape: ``(status, body, content type)``; 503 with the reason in one
    line while the journal is unusable (Prometheus marks the target down for that scrape)."""
    try:
        return (200, *exposition(collector, accept))
    except RefineError as exc:
        reason = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", f"{exc.code}: {exc.message}")
        return 503, (reason + "\n").encode("utf-8", "backslashreplace"), TEXT
