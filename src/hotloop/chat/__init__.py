"""Rendering, below the pipeline and the backends: a model's chat format (format.py), items to template
messages (messages.py), the incremental renderer and its token cache (incremental.py), media placeholders
(media.py) and the specs it renders from (specs.py). No I/O, no imports from pipeline/ or backends/."""
