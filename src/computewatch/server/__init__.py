"""`computewatch server`: the organisation-wide HTTP API (FastAPI on Uvicorn) and the live
web dashboard, over the server database (computewatch.serverdb)."""
