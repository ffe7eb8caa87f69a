"""file_search's retrieval (issue 39): a file's text extracted (extract.py), cut into overlapping token windows
(chunk.py), embedded with the model shipped in a wheel, no download (embed.py), and searched by BM25 and by vector,
the two rankings fused (hybrid.py). The Vector Stores API and the file_search tool build on these."""
