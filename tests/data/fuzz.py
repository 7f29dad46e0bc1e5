"""Hypothesis settings and line strategies shared by the readers' property-based tests."""

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# Texts: anything but tabs and line breaks (any character str.splitlines or a binary
# file's line iteration would split at).
text = st.text(st.characters(blacklist_characters="\t\n\r", blacklist_categories=("Cs",)), max_size=12)
good_line = st.tuples(text, text, st.sampled_from(["0", "1", "1.0", " 0", "0 "]))
bad_line = st.lists(text, min_size=0, max_size=5).filter(lambda fields: len(fields) != 3).map("\t".join)
