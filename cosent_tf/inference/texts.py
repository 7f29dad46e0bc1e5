"""The texts a matcher is given, checked once for both Kerases' encoders (Keras-free)."""

from __future__ import annotations

from collections.abc import Iterable


def check_texts(texts: Iterable[str], name: str = "texts") -> list[str]:
    """``texts`` as a list of str; a clear TypeError for anything else (one string, bytes, a
    non-string item), naming ``name``."""
    if isinstance(texts, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of strings, not a single {type(texts).__name__}; wrap it in a list")
    try:
        texts = list(texts)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of strings, got {type(texts).__name__}") from None
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"{name}[{i}] is a {type(text).__name__} ({text!r:.40}), not a str")
    return texts
