"""The server database's errors, under the package's one root."""

from __future__ import annotations

from computewatch.errors import ComputewatchError, UsageError

__all__ = ["BadDatabaseURL", "IngestConflict", "InvalidUpload", "ServerDbError"]


class ServerDbError(ComputewatchError):
    """A problem with the server database named in one line."""


class BadDatabaseURL(UsageError):
    """A ``--db`` URL the server cannot use (exit status 2)."""


class InvalidUpload(ServerDbError):
    """An ingest document that does not follow the upload protocol; the message says where."""


class IngestConflict(ServerDbError):
    """An upload of a run id another team already holds."""
