# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""`PagedKVCache` compiled: the same cache, block for block, in C arrays.

The pure-Python `sim.engine.kv_cache.PagedKVCache` is the reference; this is the plain
vLLM algorithm it is checked against (`tests/unit/sim/engine/test_kv_cache_reference.py`)
with C storage instead of Python lists and dicts, so a block costs a few nanoseconds
instead of a dict operation:

- reference counts, hashes and a doubly linked free queue (vLLM's `FreeKVCacheBlockQueue`)
  as arrays indexed by block id: `free` appends at the tail, `allocate` pops the head,
  `touch` unlinks a block from the middle;
- the hash → block map as an open-addressing table (linear probing, backward-shift
  deletion) of records that each hold 8 consecutive hashes (h >> 3 is the record's key):
  a trace replay's hashes come in long runs of consecutive ints, so a run costs one probe
  per 8 blocks, and the loops over a run reuse the record found last; further blocks
  carrying a hash already in the table (two requests computed one prefix at once) wait in
  a Python dict, in commit order, as in the reference.

Same public methods and errors as `PagedKVCache`, but it needs no cut of the block lists
into runs (`sim.engine.block_runs`): it returns none (`[]`, so the scheduler's bookkeeping of
cuts costs nothing) and ignores any it is given. KV events go to the same `KVEventLog` in
the same order. Hashes are any Python ints, as for the reference: those of 64 bits (Python's
`hash` of a tuple, a trace's ids) are their own keys; a wider one (a recorded trace's 64-bit
unsigned ids times the engine blocks per trace block) is given a code of its own when first
committed, in a key range no 64-bit hash reaches (codes are kept until a cache reset).
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport abort, calloc, free as c_free, malloc
from libc.string cimport memset
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE


DEF GROUP = 8  # hashes per table record: h >> 3 names the record, h & 7 the entry
DEF WIDE = 1 << 61  # record keys of wide hashes' codes start here (h >> 3 stays below 2**60)


cdef struct Group:
    int64_t key  # h >> 3 of its hashes
    int32_t count  # entries in use; 0: the slot is empty
    int32_t block[GROUP]  # the block carrying hash key·8 + i first, or -1


cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define KVG_PREFETCH(p) __builtin_prefetch((const void*)(p))
    #else
    #define KVG_PREFETCH(p) ((void)0)
    #endif
    """
    void KVG_PREFETCH(const void* p) noexcept nogil


cdef struct Block:
    int64_t hash  # the key of the hash it carries (if `has`)
    int32_t prev  # free queue links; the entry num_blocks is the sentinel
    int32_t next
    int32_t ref
    uint8_t has  # 0: no hash, 1: a 64-bit one, 2: a wide one's code


cdef inline uint64_t _mix(int64_t key) noexcept nogil:
    # splitmix64's finalizer: records spread over the table whatever the hashes.
    cdef uint64_t x = <uint64_t>key
    x ^= x >> 30
    x *= 0xbf58476d1ce4e5b9ULL
    x ^= x >> 27
    x *= 0x94d049bb133111ebULL
    x ^= x >> 31
    return x


cdef list _INTS = []  # _INTS[b] is b: the block ids handed out, one object per id for
# every cache (8 engines' copies would not stay in the CPU's caches)


cdef list _block_ints(Py_ssize_t n):
    global _INTS
    if len(_INTS) < n:
        _INTS = list(range(n))
    return _INTS


cdef list _as_list(object seq):
    return seq if type(seq) is list else list(seq)


cdef class NativeKVCache:
    """Blocks, reference counts, the free queue and the hash → block map (module doc)."""

    cdef readonly Py_ssize_t num_blocks
    cdef readonly Py_ssize_t block_size
    cdef public object events
    cdef Block* _b  # by block id: one cache line holds all a block's state
    cdef Py_ssize_t _num_free
    cdef Group* _groups
    cdef uint64_t _mask
    cdef uint64_t _last  # the record found last (checked before reuse)
    cdef Py_ssize_t _size  # hashes in the table
    cdef Py_ssize_t _records  # records in the table (at most half its slots)
    cdef dict _duplicates
    cdef list _ints
    cdef dict _codes  # wide hash → its code
    cdef list _wide  # code → wide hash

    def __cinit__(self, Py_ssize_t num_blocks, Py_ssize_t block_size):
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be positive")
        if num_blocks >= 2**31 - 1:
            raise ValueError("num_blocks must be below 2**31 - 1")
        self.num_blocks = num_blocks
        self.block_size = block_size
        cdef Py_ssize_t n = num_blocks
        cdef Py_ssize_t cap = 64  # doubled while records fill half of it (`_grow`)
        self._b = <Block*>calloc(n + 1, sizeof(Block))
        self._groups = <Group*>malloc(64 * sizeof(Group))
        if not (self._b and self._groups):
            raise MemoryError()
        self._mask = 63
        self._clear_table()
        cdef Py_ssize_t b
        for b in range(n + 1):
            self._b[b].prev = <int32_t>(b - 1 if b > 0 else n)
            self._b[b].next = <int32_t>(b + 1 if b < n else 0)
        self._num_free = n
        self._duplicates = {}
        self._codes = {}
        self._wide = []
        self._ints = _block_ints(n)
        self.events = None

    def __dealloc__(self):
        c_free(self._b)
        c_free(self._groups)

    # -- the hash table -----------------------------------------------------------------

    cdef void _clear_table(self) noexcept:
        cdef uint64_t i
        for i in range(self._mask + 1):
            self._groups[i].count = 0
        self._size = 0
        self._records = 0
        self._last = 0

    cdef inline Group* _group(self, int64_t key, bint create) noexcept:
        """The record of `key` (h >> 3); a new empty one if `create`, else NULL if none."""
        cdef Group* g = &self._groups[self._last]
        if g.count and g.key == key:
            return g
        cdef uint64_t mask = self._mask
        cdef uint64_t i = _mix(key) & mask
        cdef int k
        # Runs of hashes go on to the neighbouring records (up while committing and looking
        # up, down while evicting): fetch their home slots while this record's blocks are
        # handled, since the tables of 8 engines seldom stay in the CPU's caches.
        KVG_PREFETCH(&self._groups[_mix(key + 1) & mask])
        KVG_PREFETCH(&self._groups[_mix(key - 1) & mask])
        KVG_PREFETCH(&self._groups[_mix(key + 2) & mask])
        KVG_PREFETCH(&self._groups[_mix(key - 2) & mask])
        while True:
            g = &self._groups[i]
            if g.count == 0:
                if not create:
                    return NULL
                if 2 * (self._records + 1) > mask + 1:
                    self._grow()
                    return self._group(key, True)
                self._records += 1
                g.key = key
                for k in range(GROUP):
                    g.block[k] = -1
                self._last = i
                return g
            if g.key == key:
                self._last = i
                return g
            i = (i + 1) & mask

    # A key is a 64-bit hash h (wide = 0) or a wide hash's code h (wide = 1).

    cdef inline int32_t _get(self, int64_t h, bint wide) noexcept:
        cdef Group* g = self._group(WIDE + (h >> 3) if wide else h >> 3, False)
        return g.block[h & 7] if g != NULL else -1

    cdef inline bint _add(self, int64_t h, bint wide, int32_t block) noexcept:
        """Enter `h` → `block` unless `h` is there; whether it entered."""
        cdef Group* g = self._group(WIDE + (h >> 3) if wide else h >> 3, True)
        if g.block[h & 7] >= 0:
            return False
        g.block[h & 7] = block
        g.count += 1
        self._size += 1
        return True

    cdef inline void _replace(self, int64_t h, bint wide, int32_t block) noexcept:
        # `h` is in the table
        self._group(WIDE + (h >> 3) if wide else h >> 3, False).block[h & 7] = block

    cdef void _delete(self, int64_t h, bint wide) noexcept:
        cdef Group* g = self._group(WIDE + (h >> 3) if wide else h >> 3, False)
        if g == NULL or g.block[h & 7] < 0:
            return
        g.block[h & 7] = -1
        g.count -= 1
        self._size -= 1
        if g.count == 0:
            self._records -= 1
            self._close(<uint64_t>(g - self._groups))

    cdef void _grow(self) noexcept:
        """Twice the slots, every record entered again (a table sized for the runs of
        consecutive hashes stays small, and so in the CPU's caches)."""
        cdef uint64_t i, j, n = self._mask + 1
        cdef Group* old = self._groups
        cdef Group* bigger = <Group*>malloc(2 * n * sizeof(Group))
        if bigger == NULL:
            abort()
        self._groups = bigger
        self._mask = 2 * n - 1
        for i in range(2 * n):
            bigger[i].count = 0
        for i in range(n):
            if old[i].count:
                j = _mix(old[i].key) & self._mask
                while bigger[j].count:
                    j = (j + 1) & self._mask
                bigger[j] = old[i]
        self._last = 0
        c_free(old)

    cdef void _close(self, uint64_t i) noexcept:
        """Backward-shift deletion: records after the emptied slot i move up if they may."""
        cdef uint64_t mask = self._mask
        cdef uint64_t j = i, home
        cdef Group* groups = self._groups
        while True:
            j = (j + 1) & mask
            if groups[j].count == 0:
                break
            home = _mix(groups[j].key) & mask
            # The record at j may fill the hole at i unless its home lies in (i, j].
            if ((j - home) & mask) >= ((j - i) & mask):
                groups[i] = groups[j]
                groups[j].count = 0
                i = j

    cdef inline int _key(self, object h, bint create, int64_t* key) except -2:
        """0: `h` is a 64-bit hash (key = h); 1: a wide one (key = its code); -1: a wide one
        without a code (not `create`: it is not cached)."""
        try:
            key[0] = <int64_t>h  # Cython's inline conversion: the common case stays cheap
            return 0
        except OverflowError:
            pass
        code = self._codes.get(h)
        if code is None:
            if not create:
                return -1
            code = len(self._wide)
            self._codes[h] = code
            self._wide.append(h)
        key[0] = <int64_t>code
        return 1

    cdef inline object _hash_of(self, int32_t b):
        """The hash block b carries (it carries one), as the Python int it was given."""
        return self._wide[self._b[b].hash] if self._b[b].has == 2 else self._b[b].hash

    cdef inline int32_t _lookup(self, object h) except -2:
        cdef int64_t key
        cdef int wide = self._key(h, False, &key)
        return -1 if wide < 0 else self._get(key, wide)

    # -- the free queue -------------------------------------------------------------------

    cdef inline void _unlink(self, int32_t b) noexcept:
        self._b[self._b[b].prev].next = self._b[b].next
        self._b[self._b[b].next].prev = self._b[b].prev

    cdef inline void _append(self, int32_t b) noexcept:
        cdef int32_t s = <int32_t>self.num_blocks
        cdef int32_t tail = self._b[s].prev
        self._b[tail].next = b
        self._b[b].prev = tail
        self._b[b].next = s
        self._b[s].prev = b

    # -- gauges -----------------------------------------------------------------------------

    @property
    def num_free_blocks(self):
        """Blocks no request holds, cached or not."""
        return self._num_free

    @property
    def usage(self):
        return 1.0 - self._num_free / <double>self.num_blocks

    @property
    def num_cached_blocks(self):
        """Blocks findable by hash (held or free): what the cache could serve."""
        return self._size + sum(map(len, self._duplicates.values()))

    # -- lookups ----------------------------------------------------------------------------

    def find_cached_prefix(self, block_hashes):
        """Number of leading `block_hashes` that are cached."""
        cdef list hashes = _as_list(block_hashes)
        cdef Py_ssize_t k, n = PyList_GET_SIZE(hashes)
        for k in range(n):
            if self._lookup(<object>PyList_GET_ITEM(hashes, k)) < 0:
                return k
        return n

    def cached_blocks(self, block_hashes):
        """Block ids of the longest cached prefix of `block_hashes` (not yet touched)."""
        cdef list hashes = _as_list(block_hashes)
        cdef list ints = self._ints
        cdef list found = []
        cdef Py_ssize_t k, n = PyList_GET_SIZE(hashes)
        cdef int32_t b
        for k in range(n):
            b = self._lookup(<object>PyList_GET_ITEM(hashes, k))
            if b < 0:
                break
            found.append(<object>PyList_GET_ITEM(ints, b))
        return found

    def num_evictable(self, block_ids):
        """How many of `block_ids` sit in the free queue (touching them uses free space)."""
        cdef Py_ssize_t count = 0
        cdef Py_ssize_t b
        for b in block_ids:
            if self._b[self._index(b)].ref == 0:
                count += 1
        return count

    def evictable(self, block_ids):
        """Those of `block_ids` that sit in the free queue."""
        cdef Py_ssize_t b
        return [b for b in block_ids if self._b[self._index(b)].ref == 0]

    cdef inline Py_ssize_t _index(self, Py_ssize_t b) except -1:
        if b < 0 or b >= self.num_blocks:
            raise IndexError(f"block {b} out of range")
        return b

    def ref_count(self, Py_ssize_t block_id):
        return self._b[self._index(block_id)].ref

    def is_cached(self, block_hash):
        return self._lookup(block_hash) >= 0

    def cached_hashes(self):
        """Every hash the cache can serve (held or free), each once; O(cached blocks)."""
        cdef uint64_t i
        cdef int k
        cdef Group* g
        out = []
        for i in range(self._mask + 1):
            g = &self._groups[i]
            if g.count and g.key >= WIDE:
                out += [self._wide[(g.key - WIDE) * GROUP + k] for k in range(GROUP) if g.block[k] >= 0]
            elif g.count:
                out += [g.key * GROUP + k for k in range(GROUP) if g.block[k] >= 0]
        return out

    def peek_free(self, Py_ssize_t count):
        """The next `count` blocks `allocate` would pop, in order (nothing changes)."""
        cdef list out = []
        cdef list ints = self._ints
        cdef int32_t s = <int32_t>self.num_blocks
        cdef int32_t b = self._b[s].next
        while b != s and len(out) < count:
            out.append(<object>PyList_GET_ITEM(ints, b))
            b = self._b[b].next
        return out

    def eviction_order(self):
        """Free block ids, next to be reused first."""
        return self.peek_free(self._num_free)

    # -- changes ----------------------------------------------------------------------------

    def touch(self, block_ids):
        """Take a reference on cached blocks, removing unreferenced ones from the queue;
        returns no cut (`[]`)."""
        cdef list ids = _as_list(block_ids)
        cdef Py_ssize_t k, n = PyList_GET_SIZE(ids)
        cdef Py_ssize_t b
        for k in range(n):
            b = self._index(<object>PyList_GET_ITEM(ids, k))
            if self._b[b].ref == 0:
                self._unlink(<int32_t>b)
                self._num_free -= 1
            self._b[b].ref += 1
        return []

    def allocate(self, count, commit=()):
        """Pop `count` blocks from the head of the free queue, evicting their hashes; then
        `cache_blocks` the first len(`commit`) of them under those hashes."""
        return self.allocate_runs(count, commit)[0]

    def allocate_runs(self, Py_ssize_t count, commit=(), origin=None):
        """`allocate`, and no cut of the blocks it returns (`[]`)."""
        if count > self._num_free:
            raise ValueError(f"cannot allocate {count} blocks: {self._num_free} free")
        cdef list hashes = _as_list(commit)
        cdef Py_ssize_t k = PyList_GET_SIZE(hashes)
        if k > count:
            raise ValueError("allocate: more hashes to commit than blocks")
        cdef list ints = self._ints
        cdef list blocks = []
        cdef int32_t s = <int32_t>self.num_blocks
        cdef int32_t b
        cdef Py_ssize_t i
        cdef bint quiet = self.events is None and not self._duplicates
        for i in range(count):
            b = self._b[s].next
            self._unlink(b)
            if self._b[b].has:
                if quiet:
                    self._delete(self._b[b].hash, self._b[b].has == 2)
                else:
                    self._evict(b)
                self._b[b].has = 0
            self._b[b].ref = 1
            blocks.append(<object>PyList_GET_ITEM(ints, b))
        self._num_free -= count
        if k:
            fresh = self._commit(blocks, hashes, k)
            if self.events is not None and origin is not None:
                tokens, all_hashes, start = origin
                self.events.stored(tokens, all_hashes, (start, start + k), fresh)
        return blocks, []

    cdef _evict(self, int32_t b):
        """Block b (popped) loses its hash: the next block carrying it takes its place in
        the map, or the hash leaves the cache."""
        cdef int64_t key = self._b[b].hash
        cdef bint wide = self._b[b].has == 2
        h = self._hash_of(b)
        others = self._duplicates.get(h) if self._duplicates else None
        if others is not None:
            if self._get(key, wide) == b:
                self._replace(key, wide, <int32_t>others.pop(0))
            else:
                others.remove(b)
            if not others:
                del self._duplicates[h]
            return
        self._delete(key, wide)
        if self.events is not None:
            self.events.removed(h)

    cdef object _commit(self, list block_ids, list hashes, Py_ssize_t n):
        """Enter the first n blocks under their hashes, in order; which entered the map
        (None: every one did)."""
        cdef Py_ssize_t i
        cdef int32_t b
        cdef int64_t key
        cdef int wide
        cdef list fresh = None
        for i in range(n):
            b = <int32_t>(<Py_ssize_t>(<object>PyList_GET_ITEM(block_ids, i)))
            h = <object>PyList_GET_ITEM(hashes, i)
            wide = self._key(h, True, &key)
            self._b[b].hash = key
            self._b[b].has = 1 + wide
            if self._add(key, wide, b):
                if fresh is not None:
                    fresh.append(True)
            else:
                self._duplicates.setdefault(h, []).append(<object>PyList_GET_ITEM(block_ids, i))
                if fresh is None:
                    fresh = [True] * i
                fresh.append(False)
        return fresh

    def cache_block(self, block_id, block_hash):
        """Commit a full block under `block_hash` so later lookups can hit it."""
        self.cache_blocks((block_id,), (block_hash,))

    def cache_blocks(self, block_ids, block_hashes, pieces=None, origin=None):
        """`cache_block` for each pair, in order (`pieces`: the cut of `block_ids`, if known;
        `origin`: where they come from, for the events)."""
        cdef list ids = _as_list(block_ids)
        cdef list hashes = _as_list(block_hashes)
        cdef Py_ssize_t i, n = PyList_GET_SIZE(ids)
        if n != PyList_GET_SIZE(hashes):
            raise ValueError("cache_blocks: as many hashes as blocks are needed")
        cdef Py_ssize_t b
        for i in range(n):
            b = self._index(<object>PyList_GET_ITEM(ids, i))
            if self._b[b].has:
                raise ValueError(f"block {b} is already cached")
        fresh = self._commit(ids, hashes, n)
        if self.events is not None and origin is not None:
            tokens, all_hashes, start = origin
            self.events.stored(tokens, all_hashes, (start, start + n), fresh)

    def free(self, block_ids, pieces=None):
        """Drop one reference on each block, in reverse order (tail blocks evicted first)."""
        cdef list ids = _as_list(block_ids)
        cdef Py_ssize_t i, n = PyList_GET_SIZE(ids)
        cdef Py_ssize_t b
        for i in range(n - 1, -1, -1):
            b = self._index(<object>PyList_GET_ITEM(ids, i))
            self._b[b].ref -= 1
            if self._b[b].ref == 0:
                self._append(<int32_t>b)
                self._num_free += 1

    def reset_prefix_cache(self):
        """Forget every cached hash, as vLLM's `reset_prefix_cache`: only when no request
        holds a block (False, and nothing changes, otherwise)."""
        if self._num_free != self.num_blocks:
            return False
        cdef Py_ssize_t b
        for b in range(self.num_blocks):
            self._b[b].has = 0
        self._clear_table()
        self._duplicates.clear()
        self._codes.clear()
        self._wide.clear()
        if self.events is not None:
            self.events.cleared()
        return True
