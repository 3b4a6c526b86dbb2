"""Schedule caches (docs/cache.md): the index (index.py), the directory's lock (lock.py),
loading, verifying and updating a cache with eviction (store.py), `collsched cache build`
(build.py) and `collsched tune` (tune.py)."""
