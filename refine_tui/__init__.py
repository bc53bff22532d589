"""refine-tui: the operator's Textual dashboard and the `refine` command line."""
