"""Helpers the tests import (``tests.helpers.…``) or run as child processes."""
