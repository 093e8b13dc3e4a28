"""Uploading runs from the local store to ``computewatch server``: the protocol, the payload
built from a stored run, and the client that pushes it (docs/upload.md).
The local store is the spool: what could not be sent waits there for the next push."""
