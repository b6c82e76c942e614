"""Hostile and extreme inputs (issue #16), run through the CLI; see cases.py and tally.py."""
