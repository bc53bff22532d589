"""The dashboard's views, each owning its table, its rows, its selection, its cells and its part
of the next journal read: Goals → Runs → Attempts, and Workers, shown one at a time by the
``ViewStack``. Updates come down as slices of a journal update; enter on a row and the moves
between views go up as messages."""

from refine_tui.views.attempts import AttemptsView
from refine_tui.views.base import TableView
from refine_tui.views.goals import GoalsView
from refine_tui.views.nodes import NodesView
from refine_tui.views.runs import RunsView
from refine_tui.views.stack import ViewStack
from refine_tui.views.workers import WorkersView

__all__ = [
    "AttemptsView",
    "GoalsView",
    "NodesView",
    "RunsView",
    "TableView",
    "ViewStack",
    "WorkersView",
]
