"""Textual's Footer, its keys updated in place.

Textual's Footer recomposes on every bindings change: it removes its key widgets and mounts new
ones, styling each (≈ 10 ms a focus change, profiled: a filter's Enter moves focus from the box
to the table in the frame that shows the new list; and the removed widgets were kept, so memory
grew). Here the key widgets stay: a key no longer shown is hidden (the filter box shows only
its own key), each shown one takes its binding and repaints only if it changed. A key the
footer has no widget for is mounted in its place (escape, shown only where it goes back: the
footer would otherwise recompose to the filter box's two keys, then back, on every filter);
keys in another order, or groups, recompose as Textual does.

A footer too narrow for its keys hides whole keys, the last of ``keeps`` first (Textual's cut
the last key mid-word, and whatever came after it: at 60 columns, the Filter).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from rich.cells import cell_len
from textual.screen import Screen
from textual.widgets import Footer

from refine_tui.textual_private import FooterKey, footer_ready, key_enabled, set_key_enabled


class Shown(NamedTuple):
    """What one key widget shows, as Textual's Footer composes it."""

    key: str
    key_display: str
    description: str
    action: str
    enabled: bool
    tooltip: str


class KeyFooter(Footer):
    """The footer of key bindings (a Textual ``Footer``); ``keeps``: actions, the one kept
    longest first, when not every key fits (others go before them, the last shown first)."""

    def __init__(self, *, keeps: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.keeps = tuple(keeps)

    def on_resize(self) -> None:
        self.call_after_refresh(self._show_bindings)

    def bindings_changed(self, screen: Screen[object]) -> None:
        footer_ready(self)
        if not screen.app.app_focus:
            return
        if self.is_attached and screen is self.screen:
            self.call_after_refresh(self._show_bindings)

    async def _show_bindings(self) -> None:
        if not self.is_attached:
            return
        wanted = self._wanted()
        keys = list(self.query_children(FooterKey))
        placed = _place(wanted, keys) if wanted is not None else None
        if placed is None or len(keys) != len(self.children):
            await self.recompose()  # groups, a new key, another order: as Textual does
            if wanted is not None:
                self._fit({k.action for k in fitting(wanted, self.width_now, self.keeps)})
            return
        kept = {k.action for k in fitting(wanted or [], self.width_now, self.keeps)}
        after: FooterKey | None = None
        for widget, shown in placed:
            if widget is None:  # a new key, mounted after the one before it
                assert shown is not None
                widget = _new_key(shown)
                if after is not None:
                    await self.mount(widget, after=after)
                else:
                    await self.mount(widget, before=0 if keys else None)
            elif shown is not None:
                _show(widget, shown)
            widget.display = shown is not None and shown.action in kept
            after = widget

    @property
    def width_now(self) -> int:
        """The footer's width (the screen's until it is laid out: it is as wide)."""
        return self.size.width or self.app.size.width

    def _fit(self, kept: set[str]) -> None:
        """Hide the recomposed keys that do not fit."""
        for widget in self.query_children(FooterKey):
            widget.display = widget.action in kept

    def _wanted(self) -> list[Shown] | None:
        """The keys Footer.compose would show (the first binding of each action), or None when
        it would show more than keys (groups, the command palette)."""
        if self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE:
            return None
        first: dict[str, Shown] = {}
        for _node, binding, enabled, tooltip in self.screen.active_bindings.values():
            if not binding.show:
                continue
            if binding.group is not None:
                return None
            first.setdefault(
                binding.action,
                Shown(
                    binding.key,
                    self.app.get_key_display(binding),
                    binding.description,
                    binding.action,
                    enabled,
                    tooltip,
                ),
            )
        return list(first.values())


def fitting(wanted: list[Shown], width: int, keeps: Sequence[str]) -> list[Shown]:
    """The keys that fit in ``width`` cells (compact: key, space, description, then a space
    between keys), whole keys kept in ``keeps``' order, then the others in theirs."""
    rank = {action: i for i, action in enumerate(keeps)}
    order = sorted(wanted, key=lambda k: rank.get(k.action, len(rank)))
    used, kept = -1, set()
    for key in order:
        used += cell_len(key.key_display) + 1 + cell_len(key.description) + 1
        if used > width:
            break
        kept.add(key.action)
    return [k for k in wanted if k.action in kept]


def _place(
    wanted: list[Shown], keys: list[FooterKey]
) -> list[tuple[FooterKey | None, Shown | None]] | None:
    """Each key widget with what it shows now (None: hidden), and the wanted keys no widget
    has (None: a widget to mount there), in order; None when the wanted keys are not the
    widgets' actions in their order."""
    placed: list[tuple[FooterKey | None, Shown | None]] = []
    i, seen = 0, set()
    for n, widget in enumerate(keys):
        ahead = {w.action for w in keys[n:]}
        while i < len(wanted) and wanted[i].action not in ahead:
            if wanted[i].action in seen:
                return None  # its widget came earlier: another order
            placed.append((None, wanted[i]))
            i += 1
        if i < len(wanted) and widget.action == wanted[i].action:
            placed.append((widget, wanted[i]))
            i += 1
        else:
            placed.append((widget, None))
        seen.add(widget.action)
    for shown in wanted[i:]:
        if shown.action in seen:
            return None
        placed.append((None, shown))
    return placed


def _new_key(shown: Shown) -> FooterKey:
    """A key widget as Footer.compose makes one."""
    key = FooterKey(
        shown.key,
        shown.key_display,
        shown.description,
        shown.action,
        disabled=not shown.enabled,
        tooltip=shown.tooltip,
    )
    return key.data_bind(compact=Footer.compact)


def _show(widget: FooterKey, shown: Shown) -> None:
    was = Shown(
        widget.key,
        widget.key_display,
        widget.description,
        widget.action,
        key_enabled(widget),
        str(widget.tooltip or ""),
    )
    if was == shown:
        return
    widget.key, widget.key_display = shown.key, shown.key_display
    widget.description, widget.action = shown.description, shown.action
    set_key_enabled(widget, shown.enabled)
    widget.tooltip = shown.tooltip or None
    resized = (cell_len(was.key_display), cell_len(was.description)) != (
        cell_len(shown.key_display),
        cell_len(shown.description),
    )
    widget.refresh(layout=resized)
