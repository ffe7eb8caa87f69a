"""file_search inside the server: ingestion of vector stores' files (ingestion.py) and their search (index.py)."""
