"""Tests of the chaos suite's own logic: stream verdicts and the figures table."""
