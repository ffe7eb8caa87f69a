"""MCP tools the server runs (protocol.md §1.10): declared in a request (`declare.py`), listed or found listed in
the context (`listing.py`), called inside the response (`calls.py`, run by the step loop's executor,
pipeline/steps/executor.py) once approved where asked (`approvals.py`)."""
