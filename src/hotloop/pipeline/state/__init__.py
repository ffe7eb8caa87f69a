"""What a turn continues from and what it leaves: contexts and chain states (context.py), a connection's lanes
(session.py), the process's chain cache (chain_cache.py) and the byte-bounded LRU behind both (state_lru.py)."""
