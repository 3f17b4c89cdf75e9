# The version check ({ref}`rule 1 <rule-1>`): whether a consumer's
# max_version asks for a versioned capsule, a legacy one, or is refused (not
# a pair of ints; below the floor). One function, Verdict.check: the Python
# layers call it as _versions.check_max_version, the core's exports as a C
# method. _versions owns the policy it reads: the version produced, the
# floor in force from the environment, the floor of a call (under_floor);
# _errors words the refusals.


@cython.final
cdef class Verdict:
    """The version check and the state it reads, one object (_versions.VERDICT).

    Verdict(produced, first_floor, thread): ``produced`` is the version
    every versioned capsule made here carries (DLPACK_VERSION);
    ``first_floor()`` gives the floor in force at its first use (_versions
    reads GPU_DLPACK_MIN_VERSION then); ``thread`` is a threading.local
    whose ``floor`` is the floor of the call under way on that thread, if
    any.

    ``floor``: the floor in force, None until first used (set by
    set_min_version). ``accepted``: the versioned max_version last accepted
    against the floor in force, with that floor; consumers pass the same
    constant tuple on every call (NumPy and PyTorch do), so the common
    check is two identity tests, and a new floor is a new object, which no
    verdict cached before it matches. ``calls``: one entry per call under
    way, on any thread, with a floor of its own; while there is one, the
    cached verdict is not used and each thread's floor decides."""
    cdef public object floor
    cdef public object accepted
    cdef readonly object produced
    cdef readonly list calls
    cdef object first_floor
    cdef object thread
    # what the core keeps of `produced`: the C exchange API's request
    # (None, produced, None, None), the version as a capsule holds it, and
    # the floor `produced` itself was last accepted under
    cdef object request
    cdef uint64_t word
    cdef object produced_floor

    def __cinit__(self, produced=None, first_floor=None, thread=None):
        cdef DLPackVersion version
        self.floor = None
        self.accepted = (None, None)
        self.calls = []
        self.produced_floor = None
        self.word = 0
        self.produced = self.request = None
        if produced is not None:
            if not int_pair(<PyObject *>produced):
                raise TypeError("produced must be a (major, minor) pair of ints")
            version.major, version.minor = produced
            memcpy(&self.word, &version, sizeof(version))
            self.produced = produced
            self.request = (None, produced, None, None)
        self.first_floor = first_floor
        self.thread = thread

    cpdef object in_force(self):
        """The floor in force: ``first_floor()`` at its first use (a
        ValueError of it, a bad GPU_DLPACK_MIN_VERSION, is raised at each use
        until the value is good or a floor is set)."""
        floor = self.floor
        if floor is None:
            if self.first_floor is None:
                raise RuntimeError(NOT_CONFIGURED.decode())
            floor = self.floor = self.first_floor()
        return floor

    cpdef bint check(self, object max_version, object floor=None) except -1:
        """Validate a consumer's ``max_version``; True when it asks for a
        versioned capsule. None (an old consumer) asks for a legacy one.
        ``floor``: a floor of the call's own, else the thread's
        (under_floor), else the floor in force. A max_version that is not a
        pair of ints is _errors.bad_max_version, one below the floor
        _errors.below_floor."""
        if max_version is None:
            return False
        if floor is None and accepted_versioned(self, <PyObject *>max_version):
            return True
        if not int_pair(<PyObject *>max_version):
            raise layer_error("bad_max_version", (max_version,))
        if floor is None and PyList_GET_SIZE(self.calls):
            floor = self.thread.floor
        cdef bint in_force = floor is None
        if in_force:
            floor = self.in_force()
        if max_version < floor:
            raise layer_error("below_floor", (max_version, floor))
        if (<tuple>max_version)[0] < 1:
            return False
        if in_force:
            self.accepted = (max_version, floor)
        return True


# 1 when o is a tuple of two ints, all of their exact types (no subclass: a
# bool equals an int), else 0.
cdef inline bint int_pair(PyObject *o) noexcept:
    return (PyTuple_CheckExact(<object>o) and PyTuple_GET_SIZE(<object>o) == 2 and
            PyLong_CheckExact(<object>PyTuple_GET_ITEM(<object>o, 0)) and
            PyLong_CheckExact(<object>PyTuple_GET_ITEM(<object>o, 1)))


# 1 when max_version is the one v.check last accepted against the floor in
# force, or a pair of exact ints equal to it (callers each pass their own
# (1, 0)), and no call under way has a floor of its own; else 0.
cdef bint accepted_versioned(Verdict v, PyObject *max_version) noexcept:
    cdef int i, overflow = 0
    cdef long a, b
    if PyList_GET_SIZE(v.calls):
        return False
    cdef PyObject *acc = <PyObject *>v.accepted
    if (not PyTuple_CheckExact(<object>acc) or PyTuple_GET_SIZE(<object>acc) != 2 or
            PyTuple_GET_ITEM(<object>acc, 1) != <PyObject *>v.floor):
        return False
    cdef PyObject *known = PyTuple_GET_ITEM(<object>acc, 0)
    if known == max_version:
        return True
    if not int_pair(max_version) or not int_pair(known):
        return False
    if (PyTuple_GET_ITEM(<object>max_version, 0) == PyTuple_GET_ITEM(<object>known, 0) and
            PyTuple_GET_ITEM(<object>max_version, 1) == PyTuple_GET_ITEM(<object>known, 1)):
        return True  # the same ints (CPython keeps one of each small int)
    for i in range(2):
        a = PyLong_AsLongAndOverflow(<object>PyTuple_GET_ITEM(<object>max_version, i), &overflow)
        if overflow:
            return False
        b = PyLong_AsLongAndOverflow(<object>PyTuple_GET_ITEM(<object>known, i), &overflow)
        if overflow or a != b:
            return False
    return True


# 1 when the check accepts the request of the C exchange API (max_version =
# the version produced, against the floor in force), 0 when it refuses or a
# call under way has a floor of its own (the general path then checks again,
# and raises the refusal), -1 with the error kept for what is no refusal (an
# interrupt, SystemExit): never dropped here. Checked once per floor.
cdef int produced_accepted(Verdict v) except -1:
    if PyList_GET_SIZE(v.calls):
        return False
    if v.produced_floor is not None and v.floor is v.produced_floor:
        return True
    try:
        ok = v.check(v.produced)
    except Exception:
        return False  # refused: the general path raises it
    if ok:
        v.produced_floor = v.floor  # the one the check read (maybe just now)
    return ok


# The check in force: the policy's (_versions.VERDICT) once configure() has
# run (until then one that refuses, unconfigured, every max_version it must
# check).
cdef Verdict verdict = Verdict()
