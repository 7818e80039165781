# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The prompt's chained block hashes (`scoring.state.prefix_hash`), compiled.

`hash_blocks` and `hash_fixed_blocks` compute the same chain as the Python functions of those
names, with the xxHash library's XXH3-64 (its header, inlined: the system's `xxhash.h`); the
Python code is the reference, and `tests/unit/scoring/state/test_prefix_hash_native.py`
compares the two. At 8k tokens the Python chain costs ~30 µs (one call per block), this ~3.
Beside them, helpers for the lists of hashes routing keeps: `untracked` and `common_prefix`.
"""

from cpython.long cimport PyLong_FromUnsignedLongLong
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.ref cimport Py_INCREF, PyObject


cdef extern from "Python.h":
    void PyObject_GC_UnTrack(void *op)
from libc.stdint cimport uint64_t
from libc.stdlib cimport free, malloc


cdef extern from *:
    """
    #define XXH_INLINE_ALL
    #include <xxhash.h>
    """
    uint64_t XXH3_64bits_withSeed(const void *data, size_t length, uint64_t seed) nogil


cdef enum:
    GROUP = 128


cdef tuple _pack(uint64_t *hashes, Py_ssize_t count):
    cdef tuple out = PyTuple_New(count)
    cdef Py_ssize_t i
    cdef object h
    for i in range(count):
        h = PyLong_FromUnsignedLongLong(hashes[i])
        Py_INCREF(h)  # PyTuple_SET_ITEM steals a reference
        PyTuple_SET_ITEM(out, i, h)
    # Only ints: no cycle can pass through it. Untracked now, as the collector would untrack
    # it at its first pass, which costs one look at every item of every such young tuple.
    PyObject_GC_UnTrack(<void *>out)
    return out


cdef Py_ssize_t _count_blocks(Py_ssize_t length, Py_ssize_t block_chars, bint grow):
    cdef Py_ssize_t count = 0, size = block_chars, take
    if not grow:
        return length // block_chars
    while True:
        take = min(<Py_ssize_t>GROUP, length // size)
        count += take
        length -= take * size
        if take < GROUP:
            return count
        size *= 2


cdef tuple _chain(const unsigned char[::1] data, uint64_t seed, Py_ssize_t block_chars,
                  bint grow):
    if block_chars < 1:
        raise ValueError("block_chars must be >= 1")
    cdef Py_ssize_t length = data.shape[0]
    cdef Py_ssize_t count = _count_blocks(length, block_chars, grow)
    cdef uint64_t *hashes
    cdef uint64_t h = seed
    cdef Py_ssize_t i, pos = 0, size = block_chars
    cdef const unsigned char *base
    if count == 0:
        return ()
    if grow and count >= GROUP * 32:  # as the reference: beyond its precomputed layout
        raise ValueError("prompt too long to hash")
    hashes = <uint64_t *>malloc(count * sizeof(uint64_t))
    if hashes == NULL:
        raise MemoryError()
    base = &data[0]
    try:
        with nogil:
            for i in range(count):
                if grow and i and i % GROUP == 0:
                    size *= 2
                h = XXH3_64bits_withSeed(base + pos, size, h)
                hashes[i] = h
                pos += size
        return _pack(hashes, count)
    finally:
        free(hashes)


def untracked(numbers):
    """`numbers` (a tuple, list or set of ints and floats, for the routing state to keep) out
    of the cyclic collector: it can hold no cycle, and the collector would otherwise look at
    every item at each pass over it (a tuple it untracks at its first pass, a list or a set
    never). Anything else, or one holding anything else, is returned as it is."""
    cdef object x
    if type(numbers) is not tuple and type(numbers) is not list and type(numbers) is not set:
        return numbers
    for x in numbers:
        if type(x) is not int and type(x) is not float:
            return numbers
    PyObject_GC_UnTrack(<void *>numbers)
    return numbers


def common_prefix(a, Py_ssize_t i, b, Py_ssize_t j, Py_ssize_t limit):
    """How many of a[i], a[i + 1], … equal b[j], b[j + 1], … (at most `limit`, which must not
    reach past either's end): `prefix_hash.common_prefix_reference`, by one scan without the
    slices it compares."""
    if i < 0 or j < 0 or limit < 0 or i + limit > len(a) or j + limit > len(b):
        raise IndexError("a start or limit out of range")
    cdef Py_ssize_t k = 0
    cdef object x, y
    while k < limit:
        x = a[i + k]
        y = b[j + k]
        if x is not y and not (x == y):
            break
        k += 1
    return k


def hash_blocks(const unsigned char[::1] data, unsigned long long seed, Py_ssize_t block_chars):
    """`prefix_hash.hash_blocks`: block sizes doubling every GROUP blocks."""
    return _chain(data, seed, block_chars, True)


def hash_fixed_blocks(const unsigned char[::1] data, unsigned long long seed,
                      Py_ssize_t block_chars):
    """`prefix_hash.hash_fixed_blocks`: every block `block_chars` bytes."""
    return _chain(data, seed, block_chars, False)
