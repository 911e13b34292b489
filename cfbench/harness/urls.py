"""URLs as records and messages show them: without the user and password a URL may carry (`http://user:pass@host/`).

A server's credentials may ride in the URL a user passes (--base-url, --retriever); they are sent to the server
but never written to a run record, a results file, a leaderboard entry or a message.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def without_credentials(url: str) -> str:
    """The URL with any `user:password@` removed from its host part; everything else as given."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
