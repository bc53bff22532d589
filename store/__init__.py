"""The durable model of refine: journal, Execution (Runs/Attempts), Goals and operator commands.

Never imports Textual or refine_tui.
"""
