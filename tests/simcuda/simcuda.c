/* A simulated CUDA for the tests: CuPy's runtime and driver modules
 * replaced at their C-API (the functions cupy_backends.cuda.api.runtime and
 * .driver publish in __pyx_capi__, each named by its Cython C signature) by
 * a simulator over host memory, with a happens-before checker on every call.
 *
 * The model (CUDA Runtime API, "API synchronization behavior" and "Stream
 * synchronization behavior"; CUDA Programming Guide, "Multi-Device System:
 * Stream and Event Behavior"):
 *
 * - devices: `ndev` GPUs; the current device is per host thread
 *   (cudaSetDevice); each has a legacy default stream (handles 0 and 1) and
 *   a per-thread default stream per host thread (handle 2);
 * - streams are in-order queues that run only when the host waits for them
 *   (a GPU infinitely slow: stream synchronize, event synchronize, device
 *   synchronize, a synchronous copy, or a query that finds the work done,
 *   which it never does before the host waited). Work on the legacy default
 *   stream waits for all earlier work on the blocking streams of its device,
 *   and work on a blocking stream for earlier work on the legacy stream;
 *   streams made with cudaStreamNonBlocking do neither;
 * - an event is a position in a stream's queue (cudaEventRecord captures
 *   the work queued so far); cudaStreamWaitEvent makes a stream's later
 *   work wait for it, from any device; an event recorded on a stream of
 *   another device than its own fails (cudaErrorInvalidResourceHandle);
 * - copies: pageable host to device is staged (the source is read) when
 *   the call is made and lands in stream order; device to pageable host,
 *   host to host, and the synchronous copies to the host return once done;
 *   pinned host memory and device memory are read and written in stream
 *   order, when the stream runs;
 * - memory: device memory is host memory the host cannot touch (a mapping
 *   without access beside the simulator's own); pinned and managed memory
 *   are host memory that the host cannot touch while queued work still
 *   writes it (nor write while queued work still reads it): a host access
 *   then is reported (SIGSEGV, handled) and let through;
 * - stream capture (Programming Guide, "CUDA Graphs", "Creating a Graph
 *   Using Stream Capture"): work enqueued on a capturing stream (copies,
 *   memsets, host functions, event records and waits) becomes nodes of the
 *   capture, in call order, and runs only when the graph is launched; a
 *   stream that waits on an event recorded in the capture joins it, and must
 *   be waited for again by another of its streams before it ends
 *   (cudaErrorStreamCaptureUnjoined). What CUDA forbids during capture fails
 *   with CUDA's error, is reported, and invalidates the capture (later work
 *   on its streams fails with cudaErrorStreamCaptureInvalidated, and so does
 *   cudaStreamEndCapture): synchronizing or querying a capturing stream or
 *   its device (cudaErrorStreamCaptureUnsupported), using the legacy stream
 *   while a blocking stream of its device captures
 *   (cudaErrorStreamCaptureImplicit), querying, synchronizing or timing an
 *   event recorded in a capture (cudaErrorCapturedEvent; once the capture
 *   ended too, until the event is recorded again), a copy of pageable
 *   host memory on a capturing stream, cudaMalloc, cudaFree, cudaHostAlloc,
 *   cudaFreeHost and the synchronous copies and sets while a capture in
 *   global mode runs, or one in thread-local mode on the calling thread
 *   (cudaErrorStreamCaptureUnsupported), a wait in a capture on an event
 *   recorded outside it (cudaErrorStreamCaptureIsolation) or in another
 *   capture (cudaErrorStreamCaptureMerge). cudaGraphLaunch replays the
 *   nodes, in order, on the stream launched, as work enqueued then (the
 *   checker judges it like any other; a node's buffer freed since is a use
 *   of freed memory); launched into a capture, they are its nodes. Memory
 *   nodes (cudaMallocAsync, cudaFreeAsync under capture) are not simulated.
 *
 * The checker keeps a vector clock per stream and one for the host, and
 * for each allocation the accesses of queued work: a read or write of
 * memory last written (or a write of memory last read) by work on another
 * stream that the accessing stream never waited for (no event wait, no
 * legacy-stream order, no host synchronization in between) is reported; so
 * is device memory CuPy's memory pool takes back (pool_release, from a
 * memory hook) while queued work of another stream still uses it and the
 * stream the pool reuses the block on is not ordered after that work; so
 * are a use of freed memory, an unknown or destroyed stream or event handle,
 * an event recorded on another device's stream, a CUDA call from a host
 * function, and a call of an entry the simulator does not implement. The
 * reports are read by the tests (simcuda.take_reports). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

/* --- CUDA's numbers --------------------------------------------------------- */

enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorPeerAccessAlreadyEnabled = 704,
    cudaErrorContextIsDestroyed = 709,
    cudaErrorNotSupported = 801,
    cudaErrorIllegalState = 401,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureMerge = 902,
    cudaErrorStreamCaptureUnmatched = 903,
    cudaErrorStreamCaptureUnjoined = 904,
    cudaErrorStreamCaptureIsolation = 905,
    cudaErrorStreamCaptureImplicit = 906,
    cudaErrorCapturedEvent = 907,
};
enum { CAPTURE_GLOBAL = 0, CAPTURE_THREAD_LOCAL = 1, CAPTURE_RELAXED = 2 };
enum { CS_NONE = 0, CS_ACTIVE = 1, CS_INVALIDATED = 2 };
enum { MT_UNREGISTERED = 0, MT_HOST = 1, MT_DEVICE = 2, MT_MANAGED = 3 };
#define STREAM_NON_BLOCKING 1u
#define EVENT_DISABLE_TIMING 2u
#define MEMCPY_H2H 0
#define MEMCPY_H2D 1
#define MEMCPY_D2H 2
#define MEMCPY_D2D 3
#define MEMCPY_DEFAULT 4

#define MAX_DEVICES 8

/* --- state ------------------------------------------------------------------ */

static int ndev = 2;
static int runtime_version = 12080, driver_version = 13000, build_version = 12080;
static PyObject *runtime_error, *driver_error, *not_simulated, *pointer_attributes;
static PyObject *reports;          /* list of str */
static long long entry_calls[2][256];  /* [face: 0 C, 1 Python][entry] */
static int in_hostfn;
static __thread int cur_dev;
static int configured;

/* The variables CuPy's runtime module publishes (cdef int in runtime.pxd). */
static int v_is_hip = 0, v_cc_major = 75, v_cc_minor = 76, v_ctx_destroyed = cudaErrorContextIsDestroyed,
           v_invalid_handle = cudaErrorInvalidResourceHandle, v_invalid_value = cudaErrorInvalidValue,
           v_memory_allocation = cudaErrorMemoryAllocation, v_peer_enabled = cudaErrorPeerAccessAlreadyEnabled;

/* A spinlock over the allocation table: the SIGSEGV handler reads it, on a
 * thread that may run without the GIL (numpy.copyto releases it). */
static atomic_flag table_lock = ATOMIC_FLAG_INIT;
static void lock(void) { while (atomic_flag_test_and_set_explicit(&table_lock, memory_order_acquire)) ; }
static void unlock(void) { atomic_flag_clear_explicit(&table_lock, memory_order_release); }

/* --- where a call comes from: the innermost frame of gpu_dlpack -------------- */

static void
where(char *out, size_t n)
{
    out[0] = 0;
    PyThreadState *ts = PyThreadState_Get();
    PyFrameObject *f = PyThreadState_GetFrame(ts);
    PyFrameObject *first = NULL;
    char best[256] = "";
    int found = 0;
    while (f != NULL && !found) {
        PyCodeObject *code = PyFrame_GetCode(f);
        PyObject *file_obj = PyObject_GetAttrString((PyObject *)code, "co_filename");
        PyObject *name_obj = PyObject_GetAttrString((PyObject *)code, "co_name");
        const char *file = file_obj ? PyUnicode_AsUTF8(file_obj) : NULL;
        const char *name = name_obj ? PyUnicode_AsUTF8(name_obj) : NULL;
        if (file == NULL || name == NULL)
            PyErr_Clear();
        else if (strstr(file, "/gpu_dlpack/") && !strstr(file, "/tests/")) {
            const char *short_file = strstr(file, "/gpu_dlpack/") + 1;
            snprintf(best, sizeof best, "%s:%d in %s", short_file, PyFrame_GetLineNumber(f), name);
            found = 1;
        } else if (first == NULL && strstr(file, "/tests/") && !strstr(file, "/tests/simcuda/")) {
            const char *short_file = strstr(file, "/tests/") + 1;
            snprintf(best, sizeof best, "%s:%d in %s", short_file, PyFrame_GetLineNumber(f), name);
            first = f;
        }
        Py_XDECREF(file_obj);
        Py_XDECREF(name_obj);
        Py_DECREF(code);
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    Py_XDECREF(f);
    if (best[0])
        snprintf(out, n, " [at %s]", best);
}

/* --- reports ------------------------------------------------------------------ */

static void
report(const char *fmt, ...)
{
    char msg[1024], at[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);  /* an error already raised stays raised */
    where(at, sizeof at);
    PyObject *s = PyUnicode_FromFormat("simcuda: %s%s", msg, at);
    if (s == NULL || reports == NULL || PyList_Append(reports, s) < 0)
        PyErr_Clear();
    Py_XDECREF(s);
    PyErr_Restore(et, ev, tb);
}

/* What the SIGSEGV handler saw, formatted later (no formatting in a handler). */
typedef struct {
    int what;  /* 1 device memory, 2 pinned or managed memory with queued work, 3 freed memory */
    int write;
    uintptr_t addr, base;
    size_t size;
    unsigned pending_w, pending_r;
    int kind, device;
} Fault;
static Fault faults[64];
static atomic_int nfaults;

/* --- vector clocks ------------------------------------------------------------ */

typedef struct {
    uint64_t *v;
    int n;
} VC;

static uint64_t vc_get(const VC *c, int agent) { return agent < c->n ? c->v[agent] : 0; }

static void
vc_set(VC *c, int agent, uint64_t value)
{
    if (agent >= c->n) {
        int n = agent + 8;
        c->v = realloc(c->v, n * sizeof *c->v);
        memset(c->v + c->n, 0, (n - c->n) * sizeof *c->v);
        c->n = n;
    }
    c->v[agent] = value;
}

static void
vc_join(VC *a, const VC *b)
{
    for (int i = 0; i < b->n; i++)
        if (b->v[i] > vc_get(a, i))
            vc_set(a, i, b->v[i]);
}

static VC
vc_copy(const VC *b)
{
    VC c = {NULL, 0};
    vc_join(&c, b);
    return c;
}

static void vc_free(VC *c) { free(c->v); c->v = NULL; c->n = 0; }

static VC host_vc;  /* agent 0 */
static uint64_t host_clock;

/* --- memory ------------------------------------------------------------------- */

enum { K_DEVICE = 1, K_MANAGED, K_PINNED, K_REGISTERED };
static const char *kind_name[] = {"?", "device", "managed", "pinned", "registered pinned"};

typedef struct Access {
    size_t lo, hi;
    int agent;
    uint64_t clock;
    int write;
    char what[200];
} Access;

typedef struct {
    uintptr_t base;     /* what the program sees */
    size_t size, mapped;
    char *backing;      /* the simulator's view (NULL for registered memory: the program's own) */
    int kind, device, freed, id;
    unsigned pending_w, pending_r;  /* queued work not yet run that writes, reads it */
    int raced, host_touched, prot;
    Access *acc;
    int nacc, capacc;
    char freed_by[320];
} Alloc;

static Alloc *allocs;
static int nallocs, capallocs, next_alloc_id = 1;
static long page;

/* Not found: -1 (pageable host memory). */
static int
find_alloc(uintptr_t p)
{
    for (int i = nallocs - 1; i >= 0; i--)
        if (allocs[i].mapped && p >= allocs[i].base && p < allocs[i].base + (allocs[i].size ? allocs[i].size : 1))
            return i;
    return -1;
}

static char *
backing_of(int ai, uintptr_t p)
{
    Alloc *a = &allocs[ai];
    return a->backing ? a->backing + (p - a->base) : (char *)p;
}

/* The protection of an allocation's program view: device memory is never
 * the host's; pinned and managed memory are the host's unless queued work
 * still writes them (no access) or reads them (read only). */
static void
reprotect(Alloc *a)
{
    if (a->kind == K_REGISTERED || a->freed)
        return;
    int prot = PROT_READ | PROT_WRITE;
    if (a->kind == K_DEVICE)
        prot = a->host_touched ? PROT_READ | PROT_WRITE : PROT_NONE;
    else if (a->raced)
        prot = PROT_READ | PROT_WRITE;
    else if (a->pending_w)
        prot = PROT_NONE;
    else if (a->pending_r)
        prot = PROT_READ;
    if (a->pending_w == 0 && a->pending_r == 0)
        a->raced = 0;
    if (prot != a->prot) {
        lock();
        mprotect((void *)a->base, a->mapped, prot);
        a->prot = prot;
        unlock();
    }
}

static int
new_alloc(size_t size, int kind, int device, uintptr_t *out)
{
    size_t mapped = ((size ? size : 1) + page - 1) / page * page;
    int fd = memfd_create("simcuda", 0);
    if (fd < 0 || ftruncate(fd, mapped) < 0) {
        if (fd >= 0)
            close(fd);
        return cudaErrorMemoryAllocation;
    }
    int prot = kind == K_DEVICE ? PROT_NONE : PROT_READ | PROT_WRITE;
    void *view = mmap(NULL, mapped, prot, MAP_SHARED, fd, 0);
    void *back = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (view == MAP_FAILED || back == MAP_FAILED) {
        if (view != MAP_FAILED)
            munmap(view, mapped);
        if (back != MAP_FAILED)
            munmap(back, mapped);
        return cudaErrorMemoryAllocation;
    }
    lock();
    if (nallocs == capallocs) {
        capallocs = capallocs ? 2 * capallocs : 256;
        allocs = realloc(allocs, capallocs * sizeof *allocs);
    }
    Alloc *a = &allocs[nallocs++];
    memset(a, 0, sizeof *a);
    a->base = (uintptr_t)view;
    a->size = size;
    a->mapped = mapped;
    a->backing = back;
    a->kind = kind;
    a->device = device;
    a->id = next_alloc_id++;
    a->prot = prot;
    unlock();
    *out = (uintptr_t)view;
    return 0;
}

/* --- streams and their work ------------------------------------------------------ */

enum { S_LEGACY = 1, S_PER_THREAD, S_USER };
enum { OP_COPY = 1, OP_MEMSET, OP_WAIT, OP_MARK, OP_HOSTFN, OP_FREE };

typedef struct Stream Stream;

typedef struct Op {
    int kind;
    uint64_t seq;
    Stream *dep;        /* the stream whose position `dep_pos` this op waits for (OP_WAIT, legacy order) */
    uint64_t dep_pos;
    Stream **deps;      /* the legacy order: several streams */
    uint64_t *dep_poss;
    int ndeps;
    char *dst;          /* the simulator's views */
    const char *src;
    size_t n;
    unsigned char *staging;
    int value;
    int dst_alloc, src_alloc;  /* allocation ids whose pending counts this op holds (0: none) */
    PyObject *fn, *arg;
    int fn_style;       /* 1 launchHostFunc, 2 unmanaged, 3 stream callback */
    intptr_t fn_stream;
    int free_alloc;
    struct Op *next;
} Op;

struct Stream {
    intptr_t handle;
    int kind, device, agent, destroyed, priority;
    unsigned flags;
    pthread_t thread;
    uint64_t enqueued, executed;
    VC vc;
    Op *head, *tail;
    struct Capture *cap;       /* the capture it takes part in (NULL: none) */
    int cap_count, cap_joined; /* its work nodes in it; how many of them another member waited for */
};

static Stream **streams;
static int nstreams, capstreams;
static int nagents = 1;  /* agent 0 is the host */
static Stream *legacy[MAX_DEVICES];

#define STREAM_BASE ((intptr_t)0x5f0000000000)
#define EVENT_BASE ((intptr_t)0x5e0000000000)
#define HANDLE_STEP 0x40
#define CONTEXT_BASE ((intptr_t)0x5c0000000000)

static Stream *
new_stream(int kind, int device, unsigned flags, int priority)
{
    if (nstreams == capstreams) {
        capstreams = capstreams ? 2 * capstreams : 64;
        streams = realloc(streams, capstreams * sizeof *streams);
    }
    Stream *s = calloc(1, sizeof *s);
    s->kind = kind;
    s->device = device;
    s->flags = flags;
    s->priority = priority;
    s->agent = nagents++;
    s->handle = STREAM_BASE + (intptr_t)nstreams * HANDLE_STEP;
    s->thread = pthread_self();
    streams[nstreams++] = s;
    return s;
}

static int blocking(const Stream *s) { return s->kind != S_LEGACY && !(s->flags & STREAM_NON_BLOCKING); }

static Stream *
per_thread(int device)
{
    pthread_t me = pthread_self();
    for (int i = 0; i < nstreams; i++)
        if (streams[i]->kind == S_PER_THREAD && streams[i]->device == device && pthread_equal(streams[i]->thread, me))
            return streams[i];
    return new_stream(S_PER_THREAD, device, 0, 0);
}

static const char *
stream_name(const Stream *s, char *buf, size_t n)
{
    if (s->kind == S_LEGACY)
        snprintf(buf, n, "the legacy default stream of GPU %d", s->device);
    else if (s->kind == S_PER_THREAD)
        snprintf(buf, n, "a per-thread default stream of GPU %d", s->device);
    else
        snprintf(buf, n, "stream %#lx of GPU %d", (unsigned long)s->handle, s->device);
    return buf;
}

/* The stream a handle names (0 and 1: the legacy default stream of the
 * current device, 2: its per-thread default stream), or NULL reported. */
static Stream *
resolve_stream(intptr_t h, const char *call)
{
    if (h == 0 || h == 1)
        return legacy[cur_dev];
    if (h == 2)
        return per_thread(cur_dev);
    intptr_t off = h - STREAM_BASE;
    if (off >= 0 && off % HANDLE_STEP == 0 && off / HANDLE_STEP < nstreams) {
        Stream *s = streams[off / HANDLE_STEP];
        if (s->kind == S_USER && !s->destroyed)
            return s;
        if (s->kind == S_USER) {
            report("%s: stream %#lx was destroyed", call, (unsigned long)h);
            return NULL;
        }
    }
    report("%s: unknown stream handle %#lx", call, (unsigned long)h);
    return NULL;
}

/* --- events -------------------------------------------------------------------- */

typedef struct {
    intptr_t handle;
    int device, destroyed, recorded;
    unsigned flags;
    Stream *s;
    uint64_t pos;
    VC vc;
    struct Capture *cap;  /* last recorded in this capture (NULL: on a stream that ran) */
    Stream *cap_stream;
    int cap_pos;
} Event;

static Event **events;
static int nevents, capevents;

static Event *
resolve_event(intptr_t h, const char *call)
{
    intptr_t off = h - EVENT_BASE;
    if (off >= 0 && off % HANDLE_STEP == 0 && off / HANDLE_STEP < nevents) {
        Event *e = events[off / HANDLE_STEP];
        if (!e->destroyed)
            return e;
        report("%s: event %#lx was destroyed", call, (unsigned long)h);
        return NULL;
    }
    report("%s: unknown event handle %#lx", call, (unsigned long)h);
    return NULL;
}

/* --- the checker ----------------------------------------------------------------- */

/* Whether queued work with clock `vc` (on `agent`) is ordered after an
 * access `a`: the same stream, or a clock that has seen it. */
static int ordered(const Access *a, int agent, const VC *vc) { return a->agent == agent || a->clock <= vc_get(vc, a->agent); }

static const char *
agent_name(int agent, char *buf, size_t n)
{
    if (agent == 0)
        return "the host";
    for (int i = 0; i < nstreams; i++)
        if (streams[i]->agent == agent)
            return stream_name(streams[i], buf, n);
    return "a stream";
}

static void
describe_alloc(const Alloc *a, char *buf, size_t n)
{
    if (a->kind == K_DEVICE || a->kind == K_MANAGED)
        snprintf(buf, n, "%s memory of GPU %d (allocation #%d of %zu bytes at %#lx)", kind_name[a->kind], a->device,
                 a->id, a->size, (unsigned long)a->base);
    else
        snprintf(buf, n, "%s host memory (allocation #%d of %zu bytes at %#lx)", kind_name[a->kind], a->id, a->size,
                 (unsigned long)a->base);
}

/* An access of [p, p + n) by queued work on `agent` with clock `vc`: checked
 * against the earlier accesses of its allocation, then recorded. */
static void
check_access(int ai, uintptr_t p, size_t n, int agent, const VC *vc, int write, const char *what)
{
    Alloc *a = &allocs[ai];
    size_t lo = p - a->base, hi = lo + n;
    int reported = 0;
    for (int i = 0; i < a->nacc && !reported; i++) {
        Access *r = &a->acc[i];
        if (r->hi <= lo || r->lo >= hi || ordered(r, agent, vc) || (!r->write && !write))
            continue;
        char an[96], bn[96], al[200];
        describe_alloc(a, al, sizeof al);
        report("%s %s %zu bytes at +%zu of %s, which %s %s (%s); %s never waited for that work", what,
               write ? "writes" : "reads", n, lo, al, agent_name(r->agent, bn, sizeof bn),
               r->write ? "writes" : "reads", r->what, agent_name(agent, an, sizeof an));
        reported = 1;
    }
    /* What this write covers and comes after is forgotten; then what the host has seen. */
    int k = 0;
    for (int i = 0; i < a->nacc; i++) {
        Access *r = &a->acc[i];
        int covered = write && r->lo >= lo && r->hi <= hi && ordered(r, agent, vc);
        int seen = r->clock <= vc_get(&host_vc, r->agent);
        if (!covered && !seen)
            a->acc[k++] = *r;
    }
    a->nacc = k;
    if (a->nacc == a->capacc) {
        a->capacc = a->capacc ? 2 * a->capacc : 8;
        a->acc = realloc(a->acc, a->capacc * sizeof *a->acc);
    }
    Access *r = &a->acc[a->nacc++];
    r->lo = lo;
    r->hi = hi;
    r->agent = agent;
    r->clock = vc_get(vc, agent);
    r->write = write;
    snprintf(r->what, sizeof r->what, "%s", what);
}

/* --- running queued work ----------------------------------------------------------- */

static Alloc *by_id(int id)
{
    for (int i = 0; i < nallocs; i++)
        if (allocs[i].id == id)
            return &allocs[i];
    return NULL;
}

static void run_until(Stream *s, uint64_t pos);

static void
execute(Op *op)
{
    for (int i = 0; i < op->ndeps; i++)
        run_until(op->deps[i], op->dep_poss[i]);
    if (op->dep)
        run_until(op->dep, op->dep_pos);
    switch (op->kind) {
    case OP_COPY:
        memmove(op->dst, op->staging ? (const char *)op->staging : op->src, op->n);
        break;
    case OP_MEMSET:
        memset(op->dst, op->value, op->n);
        break;
    case OP_HOSTFN: {
        in_hostfn++;
        PyObject *r = NULL;
        if (op->fn_style == 3)
            r = PyObject_CallFunction(op->fn, "niO", (Py_ssize_t)op->fn_stream, 0, op->arg);
        else
            r = PyObject_CallOneArg(op->fn, op->arg);
        in_hostfn--;
        if (r == NULL)
            PyErr_WriteUnraisable(op->fn);
        Py_XDECREF(r);
        break;
    }
    case OP_FREE: {
        Alloc *a = by_id(op->free_alloc);
        if (a && a->backing) {
            munmap(a->backing, a->mapped);
            a->backing = NULL;
        }
        break;
    }
    default:
        break;
    }
    Alloc *d = op->dst_alloc ? by_id(op->dst_alloc) : NULL, *s = op->src_alloc ? by_id(op->src_alloc) : NULL;
    if (d) {
        d->pending_w--;
        reprotect(d);
    }
    if (s) {
        s->pending_r--;
        reprotect(s);
    }
}

static void
free_op(Op *op)
{
    free(op->staging);
    free(op->deps);
    free(op->dep_poss);
    Py_XDECREF(op->fn);
    Py_XDECREF(op->arg);
    free(op);
}

/* Run the work queued on `s` up to position `pos`, and what it waits for. */
static void
run_until(Stream *s, uint64_t pos)
{
    while (s->executed < pos && s->head != NULL) {
        Op *op = s->head;
        s->head = op->next;
        if (s->head == NULL)
            s->tail = NULL;
        execute(op);
        s->executed = op->seq;
        free_op(op);
    }
}

/* Whether the work queued on `s` up to `pos` is only bookkeeping (event
 * records, waits) whose waits are met, or met once such bookkeeping of
 * other streams is done: then it has run (it takes a GPU no time), and it
 * is run. A query finds such work done; work that moves memory stays
 * queued until the host waits for it. */
static int
settle(Stream *s, uint64_t pos)
{
    while (s->executed < pos && s->head != NULL) {
        Op *op = s->head;
        if (op->kind != OP_MARK && op->kind != OP_WAIT)
            return 0;
        if (op->dep && !settle(op->dep, op->dep_pos))
            return 0;
        for (int i = 0; i < op->ndeps; i++)
            if (!settle(op->deps[i], op->dep_poss[i]))
                return 0;
        run_until(s, op->seq);
    }
    return 1;
}

static void
run_all(void)
{
    for (int i = 0; i < nstreams; i++)
        run_until(streams[i], streams[i]->enqueued);
}

/* The host waits for `s` up to `pos`, whose clock is `vc`: it has seen it. */
static void
host_waits(Stream *s, uint64_t pos, const VC *vc)
{
    run_until(s, pos);
    vc_join(&host_vc, vc);
}

/* Queue an op on `s`: ordered after the stream's earlier work, the host's
 * calls so far, what it waits for (`wait`, at `wait_pos` with clock
 * `wait_vc`), and the legacy default stream's order. */
static Op *
enqueue(Stream *s, int kind, Stream *wait, uint64_t wait_pos, const VC *wait_vc)
{
    Op *op = calloc(1, sizeof *op);
    op->kind = kind;
    VC vc = vc_copy(&s->vc);
    host_clock++;
    vc_set(&host_vc, 0, host_clock);
    vc_join(&vc, &host_vc);
    if (wait) {
        op->dep = wait;
        op->dep_pos = wait_pos;
        vc_join(&vc, wait_vc);
    }
    Stream *order[64];
    int norder = 0;
    if (s->kind == S_LEGACY) {
        for (int i = 0; i < nstreams && norder < 64; i++) {
            Stream *b = streams[i];
            if (b != s && b->device == s->device && blocking(b) && b->enqueued)
                order[norder++] = b;
        }
    } else if (blocking(s) && legacy[s->device]->enqueued) {
        order[norder++] = legacy[s->device];
    }
    if (norder) {
        op->deps = malloc(norder * sizeof *op->deps);
        op->dep_poss = malloc(norder * sizeof *op->dep_poss);
        for (int i = 0; i < norder; i++) {
            op->deps[i] = order[i];
            op->dep_poss[i] = order[i]->enqueued;
            vc_join(&vc, &order[i]->vc);
        }
        op->ndeps = norder;
    }
    op->seq = ++s->enqueued;
    vc_set(&vc, s->agent, op->seq);
    vc_free(&s->vc);
    s->vc = vc;
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    return op;
}

/* --- raising ------------------------------------------------------------------------ */

static PyObject *
rt_raise(int status)
{
    PyObject *exc = PyObject_CallFunction(runtime_error, "i", status);
    if (exc != NULL) {
        PyErr_SetObject(runtime_error, exc);
        Py_DECREF(exc);
    }
    return NULL;
}

static PyObject *
unsimulated(const char *module, const char *name)
{
    report("%s.%s is not simulated", module, name);
    PyErr_Format(not_simulated, "the simulated CUDA does not implement %s.%s", module, name);
    return NULL;
}

static PyObject *
no_kernels(const char *name)
{
    PyErr_Format(not_simulated, "the simulated CUDA runs no kernels (driver.%s): this test needs a GPU", name);
    return NULL;
}

/* --- stream capture (CUDA Programming Guide, "CUDA Graphs: Creating a Graph Using Stream Capture") --- */
/* Work enqueued on a capturing stream is recorded as nodes, in the order of
 * the calls (a valid order of the graph's dependencies), and runs only when
 * an instantiated graph is launched. */

typedef struct Node {
    int kind;            /* OP_COPY, OP_MEMSET, OP_HOSTFN (work); OP_MARK, OP_WAIT (order within the capture) */
    uintptr_t dst, src;  /* the program's addresses, found again at each launch */
    size_t n;
    int value, copy_kind;
    PyObject *fn, *arg;
    int fn_style;
    intptr_t fn_stream;
} Node;

typedef struct {
    Node *v;
    int n, cap;
} Nodes;

typedef struct Capture {
    int id, mode, status;  /* status: CS_ACTIVE, CS_INVALIDATED, CS_NONE once ended */
    Stream *origin;
    pthread_t thread;
    Nodes nodes;
} Capture;

static Capture **captures;
static int ncaptures, capcaptures;

static void
nodes_add(Nodes *ns, const Node *n)
{
    if (ns->n == ns->cap) {
        ns->cap = ns->cap ? 2 * ns->cap : 16;
        ns->v = realloc(ns->v, ns->cap * sizeof *ns->v);
    }
    Node *to = &ns->v[ns->n++];
    *to = *n;
    Py_XINCREF(to->fn);
    Py_XINCREF(to->arg);
}

static void
nodes_clear(Nodes *ns)
{
    for (int i = 0; i < ns->n; i++) {
        Py_XDECREF(ns->v[i].fn);
        Py_XDECREF(ns->v[i].arg);
    }
    free(ns->v);
    ns->v = NULL;
    ns->n = ns->cap = 0;
}

static const char *mode_name[] = {"global", "thread-local", "relaxed"};

/* A capture its stream `s` records a node in (work nodes count toward the
 * fork and join rule). */
static void
capture_node(Stream *s, const Node *n)
{
    nodes_add(&s->cap->nodes, n);
    if (n->kind == OP_COPY || n->kind == OP_MEMSET || n->kind == OP_HOSTFN)
        s->cap_count++;
}

/* The capture is invalidated: every later call on its streams fails with
 * cudaErrorStreamCaptureInvalidated, and so does cudaStreamEndCapture. */
static void
invalidate(Capture *c)
{
    if (c->status == CS_ACTIVE)
        c->status = CS_INVALIDATED;
}

static void
end_capture(Capture *c)
{
    for (int i = 0; i < nstreams; i++)
        if (streams[i]->cap == c) {
            streams[i]->cap = NULL;
            streams[i]->cap_count = streams[i]->cap_joined = 0;
        }
    c->status = CS_NONE;
}

/* A capture (running or invalidated, not ended) that a blocking stream of
 * `device` takes part in: the legacy default stream then may not be used. */
static Capture *
blocking_capture_on(int device)
{
    for (int i = 0; i < nstreams; i++) {
        Stream *s = streams[i];
        if (s->cap && s->device == device && blocking(s))
            return s->cap;
    }
    return NULL;
}

/* An operation CUDA forbids during capture: reported, the capture
 * invalidated, and CUDA's `status` raised. */
static PyObject *
forbidden(Capture *c, int status, const char *fmt, ...)
{
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    report("%s: it invalidates stream capture #%d (CUDA fails it with error %d)", msg, c->id, status);
    invalidate(c);
    return rt_raise(status);
}

/* Before work is enqueued on `s`: 0 it runs (is queued), 1 it is a node of
 * the capture `s` takes part in, -1 refused (raised). */
static int
capture_check(Stream *s, const char *call)
{
    char sn[96];
    if (s->cap) {
        if (s->cap->status == CS_INVALIDATED) {
            rt_raise(cudaErrorStreamCaptureInvalidated);
            return -1;
        }
        return 1;
    }
    if (s->kind == S_LEGACY) {
        Capture *c = blocking_capture_on(s->device);
        if (c) {
            forbidden(c, cudaErrorStreamCaptureImplicit, "%s on %s while a blocking stream of its device captures",
                      call, stream_name(s, sn, sizeof sn));
            return -1;
        }
    }
    return 0;
}

/* A call CUDA calls potentially unsafe during capture (it may synchronize
 * implicitly: cudaMalloc, cudaFree, the synchronous copies and sets): refused
 * while a capture in global mode runs, or in thread-local mode on this
 * thread; allowed by relaxed captures. -1 refused (raised). */
static int
unsafe_check(const char *call)
{
    for (int i = 0; i < ncaptures; i++) {
        Capture *c = captures[i];
        if (c->status == CS_ACTIVE && (c->mode == CAPTURE_GLOBAL ||
                                       (c->mode == CAPTURE_THREAD_LOCAL && pthread_equal(c->thread, pthread_self())))) {
            forbidden(c, cudaErrorStreamCaptureUnsupported, "%s during a capture in %s mode", call,
                      mode_name[c->mode]);
            return -1;
        }
    }
    return 0;
}

/* The host waits for `s` (or queries it): forbidden on a stream that takes
 * part in a capture, and on the legacy stream while a blocking stream of its
 * device captures. 0 allowed, else CUDA's status (reported, invalidated). */
static int
sync_check(Stream *s, const char *call)
{
    char sn[96];
    if (s->cap) {
        Capture *c = s->cap;
        if (c->status == CS_INVALIDATED)
            return cudaErrorStreamCaptureInvalidated;
        forbidden(c, cudaErrorStreamCaptureUnsupported, "%s of %s, which captures", call, stream_name(s, sn, sizeof sn));
        PyErr_Clear();
        return cudaErrorStreamCaptureUnsupported;
    }
    if (s->kind == S_LEGACY) {
        Capture *c = blocking_capture_on(s->device);
        if (c) {
            forbidden(c, cudaErrorStreamCaptureImplicit, "%s of %s while a blocking stream of its device captures",
                      call, stream_name(s, sn, sizeof sn));
            PyErr_Clear();
            return cudaErrorStreamCaptureImplicit;
        }
    }
    return 0;
}

/* An event last recorded in a capture: querying, synchronizing or timing it
 * is forbidden (cudaErrorCapturedEvent), and invalidates the capture if it
 * still runs. 0 allowed. */
static int
captured_event_check(Event *e, const char *call)
{
    if (e->cap == NULL)
        return 0;
    if (e->cap->status != CS_NONE) {
        forbidden(e->cap, cudaErrorCapturedEvent, "%s of event %#lx, recorded in the capture", call,
                  (unsigned long)e->handle);
        PyErr_Clear();
    } else {
        report("%s of event %#lx, last recorded in stream capture #%d (CUDA fails it with error %d)", call,
               (unsigned long)e->handle, e->cap->id, cudaErrorCapturedEvent);
    }
    return cudaErrorCapturedEvent;
}

/* graphs and their executables: one table, two handle ranges */

#define GRAPH_BASE ((intptr_t)0x5d0000000000)
#define EXEC_BASE ((intptr_t)0x5b0000000000)

typedef struct {
    intptr_t handle;
    int destroyed;
    Nodes nodes;
} Graph;

static Graph **graphs;
static int ngraphs, capgraphs;

static intptr_t
new_graph(intptr_t base, const Nodes *from)
{
    if (ngraphs == capgraphs) {
        capgraphs = capgraphs ? 2 * capgraphs : 32;
        graphs = realloc(graphs, capgraphs * sizeof *graphs);
    }
    Graph *g = calloc(1, sizeof *g);
    g->handle = base + (intptr_t)ngraphs * HANDLE_STEP;
    for (int i = 0; i < from->n; i++)
        nodes_add(&g->nodes, &from->v[i]);
    graphs[ngraphs++] = g;
    return g->handle;
}

static Graph *
resolve_graph(intptr_t base, intptr_t h, const char *call)
{
    intptr_t off = h - base;
    const char *what = base == GRAPH_BASE ? "graph" : "graph executable";
    if (off >= 0 && off % HANDLE_STEP == 0 && off / HANDLE_STEP < ngraphs) {
        Graph *g = graphs[off / HANDLE_STEP];
        if (g->handle == h && !g->destroyed)
            return g;
        if (g->handle == h) {
            report("%s: %s %#lx was destroyed", call, what, (unsigned long)h);
            return NULL;
        }
    }
    report("%s: unknown %s handle %#lx", call, what, (unsigned long)h);
    return NULL;
}

static void ensure_handler(void);

/* Every C entry starts here: counted per face (CuPy and the core call with
 * __pyx_skip_dispatch 0, the Python face with 1), refused in a host function. */
static int
enter(int entry, int skip, const char *name)
{
    entry_calls[skip ? 1 : 0][entry]++;
    if (!configured) {
        PyErr_SetString(PyExc_RuntimeError, "simcuda is not configured");
        return -1;
    }
    if (in_hostfn)
        report("runtime.%s was called from a host function (cudaLaunchHostFunc forbids CUDA calls there)", name);
    ensure_handler();
    return 0;
}

#define ENTER(id, skip, name, fail)      \
    do {                                 \
        if (enter(id, skip, name) < 0)   \
            return fail;                 \
    } while (0)

/* --- the runtime entries ------------------------------------------------------------- */

/* The index of each entry in `entry_table` (for the call counts). */
enum {
#define X(id) E_##id,
#include "entries.h"
#undef X
    E_COUNT
};

static PyObject *
check_status(int status, int skip)
{
    ENTER(E_check_status, skip, "check_status", NULL);
    if (status)
        return rt_raise(status);
    Py_RETURN_NONE;
}

static int
driverGetVersion(int skip)
{
    ENTER(E_driverGetVersion, skip, "driverGetVersion", -1);
    return driver_version;
}

static int
runtimeGetVersion(int skip)
{
    ENTER(E_runtimeGetVersion, skip, "runtimeGetVersion", -1);
    return runtime_version;
}

static int
_getCUDAMajorVersion(int skip)
{
    ENTER(E__getCUDAMajorVersion, skip, "_getCUDAMajorVersion", -1);
    return runtime_version / 1000;
}

static int
getDevice(int skip)
{
    ENTER(E_getDevice, skip, "getDevice", -1);
    return cur_dev;
}

static int
check_device(int device)
{
    if (device < 0 || device >= ndev) {
        rt_raise(cudaErrorInvalidDevice);
        return -1;
    }
    return 0;
}

static PyObject *
setDevice(int device, int skip)
{
    ENTER(E_setDevice, skip, "setDevice", NULL);
    if (check_device(device) < 0)
        return NULL;
    cur_dev = device;
    Py_RETURN_NONE;
}

static int getDeviceCount(int skip)
{
    ENTER(E_getDeviceCount, skip, "getDeviceCount", -1);
    return ndev;
}

#define N_ATTR 256
static int attributes[MAX_DEVICES][N_ATTR];

static int
deviceGetAttribute(int attr, int device, int skip)
{
    ENTER(E_deviceGetAttribute, skip, "deviceGetAttribute", -1);
    if (check_device(device) < 0)
        return -1;
    if (attr < 0 || attr >= N_ATTR) {
        rt_raise(cudaErrorInvalidValue);
        return -1;
    }
    return attributes[device][attr];
}

static int
deviceGetByPCIBusId(PyObject *bus, int skip)
{
    ENTER(E_deviceGetByPCIBusId, skip, "deviceGetByPCIBusId", -1);
    unsimulated("runtime", "deviceGetByPCIBusId");
    return -1;
}

static PyObject *
deviceGetPCIBusId(int device, int skip)
{
    ENTER(E_deviceGetPCIBusId, skip, "deviceGetPCIBusId", NULL);
    if (check_device(device) < 0)
        return NULL;
    return PyUnicode_FromFormat("0000:%02d:00.0", device + 1);
}

static PyObject *
getDeviceProperties(int device, int skip)
{
    ENTER(E_getDeviceProperties, skip, "getDeviceProperties", NULL);
    if (check_device(device) < 0)
        return NULL;
    int *at = attributes[device];
    return Py_BuildValue(
        "{s:y,s:K,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i}",
        "name", "simcuda GPU (simulated on the host)", "totalGlobalMem", (unsigned long long)80 << 30,
        "sharedMemPerBlock", at[8], "regsPerBlock", 65536, "warpSize", at[10], "maxThreadsPerBlock", at[1],
        "clockRate", at[13], "major", at[75], "minor", at[76], "multiProcessorCount", at[16],
        "integrated", 0, "canMapHostMemory", at[19], "computeMode", 0, "concurrentKernels", 1, "ECCEnabled", 0,
        "pciBusID", device + 1, "pciDeviceID", 0, "pciDomainID", 0, "asyncEngineCount", 2,
        "unifiedAddressing", at[41], "managedMemory", at[83], "concurrentManagedAccess", at[89],
        "pageableMemoryAccess", at[88], "pageableMemoryAccessUsesHostPageTables", at[100],
        "l2CacheSize", 50 << 20, "maxThreadsPerMultiProcessor", 2048);
}

static PyObject *
deviceSynchronize(int skip)
{
    ENTER(E_deviceSynchronize, skip, "deviceSynchronize", NULL);
    for (int i = 0; i < nstreams; i++)
        if (streams[i]->device == cur_dev && streams[i]->cap) {
            if (streams[i]->cap->status == CS_INVALIDATED)
                return rt_raise(cudaErrorStreamCaptureInvalidated);
            return forbidden(streams[i]->cap, cudaErrorStreamCaptureUnsupported,
                             "cudaDeviceSynchronize of GPU %d while one of its streams captures", cur_dev);
        }
    for (int i = 0; i < nstreams; i++)
        if (streams[i]->device == cur_dev)
            host_waits(streams[i], streams[i]->enqueued, &streams[i]->vc);
    Py_RETURN_NONE;
}

static int
deviceCanAccessPeer(int device, int peer, int skip)
{
    ENTER(E_deviceCanAccessPeer, skip, "deviceCanAccessPeer", -1);
    if (check_device(device) < 0 || check_device(peer) < 0)
        return -1;
    return device != peer;
}

static PyObject *
deviceEnablePeerAccess(int peer, int skip)
{
    ENTER(E_deviceEnablePeerAccess, skip, "deviceEnablePeerAccess", NULL);
    if (check_device(peer) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
_deviceEnsurePeerAccess(int peer, int skip)
{
    ENTER(E__deviceEnsurePeerAccess, skip, "_deviceEnsurePeerAccess", NULL);
    if (check_device(peer) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static size_t
deviceGetLimit(int limit, int skip)
{
    ENTER(E_deviceGetLimit, skip, "deviceGetLimit", (size_t)-1);
    return 0;
}

static PyObject *
deviceSetLimit(int limit, size_t value, int skip)
{
    ENTER(E_deviceSetLimit, skip, "deviceSetLimit", NULL);
    Py_RETURN_NONE;
}

/* memory */

static size_t allocated_bytes;

static intptr_t
do_malloc(size_t size, int kind, int device)
{
    if (size == 0)
        return 0;
    uintptr_t p;
    int rc = new_alloc(size, kind, device, &p);
    if (rc) {
        rt_raise(rc);
        return 0;
    }
    allocated_bytes += size;
    return (intptr_t)p;
}

static intptr_t
sim_malloc(size_t size, int skip)
{
    ENTER(E_malloc, skip, "malloc", 0);
    if (unsafe_check("cudaMalloc") < 0)
        return 0;
    return do_malloc(size, K_DEVICE, cur_dev);
}

struct opt_flags {
    int n;
    unsigned int flags;
};

static intptr_t
mallocManaged(size_t size, int skip, struct opt_flags *opt)
{
    ENTER(E_mallocManaged, skip, "mallocManaged", 0);
    return do_malloc(size, K_MANAGED, cur_dev);
}

static intptr_t
malloc3DArray(intptr_t desc, size_t w, size_t h, size_t d, int skip, struct opt_flags *opt)
{
    ENTER(E_malloc3DArray, skip, "malloc3DArray", 0);
    unsimulated("runtime", "malloc3DArray");
    return 0;
}

static intptr_t
mallocArray(intptr_t desc, size_t w, size_t h, int skip, struct opt_flags *opt)
{
    ENTER(E_mallocArray, skip, "mallocArray", 0);
    unsimulated("runtime", "mallocArray");
    return 0;
}

static intptr_t
mallocAsync(size_t size, intptr_t stream, int skip)
{
    ENTER(E_mallocAsync, skip, "mallocAsync", 0);
    Stream *s = resolve_stream(stream, "mallocAsync");
    if (s == NULL) {
        rt_raise(cudaErrorInvalidResourceHandle);
        return 0;
    }
    int captured = capture_check(s, "cudaMallocAsync");
    if (captured) {
        if (captured > 0)
            unsimulated("runtime", "mallocAsync under stream capture (a memory node)");
        return 0;
    }
    return do_malloc(size, K_DEVICE, cur_dev);
}

static intptr_t
mallocFromPoolAsync(size_t size, intptr_t pool, intptr_t stream, int skip)
{
    ENTER(E_mallocFromPoolAsync, skip, "mallocFromPoolAsync", 0);
    unsimulated("runtime", "mallocFromPoolAsync");
    return 0;
}

static intptr_t
hostAlloc(size_t size, unsigned int flags, int skip)
{
    ENTER(E_hostAlloc, skip, "hostAlloc", 0);
    if (unsafe_check("cudaHostAlloc") < 0)
        return 0;
    return do_malloc(size, K_PINNED, cur_dev);
}

static PyObject *
hostRegister(intptr_t ptr, size_t size, unsigned int flags, int skip)
{
    ENTER(E_hostRegister, skip, "hostRegister", NULL);
    if (find_alloc((uintptr_t)ptr) >= 0 && !allocs[find_alloc((uintptr_t)ptr)].freed)
        return rt_raise(cudaErrorInvalidValue);
    lock();
    if (nallocs == capallocs) {
        capallocs = capallocs ? 2 * capallocs : 256;
        allocs = realloc(allocs, capallocs * sizeof *allocs);
    }
    Alloc *a = &allocs[nallocs++];
    memset(a, 0, sizeof *a);
    a->base = (uintptr_t)ptr;
    a->size = a->mapped = size;
    a->kind = K_REGISTERED;
    a->device = cur_dev;
    a->id = next_alloc_id++;
    unlock();
    Py_RETURN_NONE;
}

/* A live allocation of `kind` starting at `ptr`, or -1 reported. */
static int
to_free(intptr_t ptr, int kind, int kind2, const char *call)
{
    int ai = find_alloc((uintptr_t)ptr);
    if (ai < 0 || allocs[ai].base != (uintptr_t)ptr || (allocs[ai].kind != kind && allocs[ai].kind != kind2)) {
        report("%s of %#lx, which is no allocation of its kind", call, (unsigned long)ptr);
        return -1;
    }
    if (allocs[ai].freed) {
        report("%s of %#lx, which was already freed (%s)", call, (unsigned long)ptr, allocs[ai].freed_by);
        return -1;
    }
    return ai;
}

/* Free now: what is queued is run first (cudaFree and cudaFreeHost wait for
 * the device), the host learns nothing by it; the program's view stays
 * reserved without access, so that a later use is seen. */
static void
release(int ai, const char *call)
{
    run_all();
    Alloc *a = &allocs[ai];
    char at[300];
    where(at, sizeof at);
    snprintf(a->freed_by, sizeof a->freed_by, "by %s%s", call, at);
    allocated_bytes -= a->kind == K_REGISTERED ? 0 : a->size;
    lock();
    a->freed = 1;
    a->nacc = 0;
    if (a->kind == K_REGISTERED) {
        a->mapped = 0;  /* the program's own memory again: pageable, no longer known here */
    } else {
        mprotect((void *)a->base, a->mapped, PROT_NONE);
        a->prot = PROT_NONE;
        if (a->backing)
            munmap(a->backing, a->mapped);
        a->backing = NULL;
    }
    unlock();
}

static PyObject *
hostUnregister(intptr_t ptr, int skip)
{
    ENTER(E_hostUnregister, skip, "hostUnregister", NULL);
    int ai = to_free(ptr, K_REGISTERED, K_REGISTERED, "hostUnregister");
    if (ai < 0)
        return rt_raise(cudaErrorInvalidValue);
    release(ai, "cudaHostUnregister");
    Py_RETURN_NONE;
}

static PyObject *
sim_free(intptr_t ptr, int skip)
{
    ENTER(E_free, skip, "free", NULL);
    if (ptr == 0)
        Py_RETURN_NONE;
    if (unsafe_check("cudaFree") < 0)
        return NULL;
    int ai = to_free(ptr, K_DEVICE, K_MANAGED, "cudaFree");
    if (ai < 0)
        return rt_raise(cudaErrorInvalidValue);
    release(ai, "cudaFree");
    Py_RETURN_NONE;
}

static PyObject *
freeHost(intptr_t ptr, int skip)
{
    ENTER(E_freeHost, skip, "freeHost", NULL);
    if (ptr == 0)
        Py_RETURN_NONE;
    if (unsafe_check("cudaFreeHost") < 0)
        return NULL;
    int ai = to_free(ptr, K_PINNED, K_PINNED, "cudaFreeHost");
    if (ai < 0)
        return rt_raise(cudaErrorInvalidValue);
    release(ai, "cudaFreeHost");
    Py_RETURN_NONE;
}

static PyObject *
freeArray(intptr_t ptr, int skip)
{
    ENTER(E_freeArray, skip, "freeArray", NULL);
    return unsimulated("runtime", "freeArray");
}

static PyObject *
freeAsync(intptr_t ptr, intptr_t stream, int skip)
{
    ENTER(E_freeAsync, skip, "freeAsync", NULL);
    Stream *s = resolve_stream(stream, "freeAsync");
    if (s == NULL)
        return rt_raise(cudaErrorInvalidResourceHandle);
    int captured = capture_check(s, "cudaFreeAsync");
    if (captured)
        return captured > 0 ? unsimulated("runtime", "freeAsync under stream capture (a memory node)") : NULL;
    int ai = to_free(ptr, K_DEVICE, K_DEVICE, "cudaFreeAsync");
    if (ai < 0)
        return rt_raise(cudaErrorInvalidValue);
    /* Freed in stream order: later uses are reported now, the memory goes when the stream runs. */
    Op *op = enqueue(s, OP_FREE, NULL, 0, NULL);
    op->free_alloc = allocs[ai].id;
    char at[300];
    where(at, sizeof at);
    snprintf(allocs[ai].freed_by, sizeof allocs[ai].freed_by, "by cudaFreeAsync%s", at);
    allocs[ai].freed = 1;
    Py_RETURN_NONE;
}

static PyObject *
memGetInfo(int skip)
{
    ENTER(E_memGetInfo, skip, "memGetInfo", NULL);
    unsigned long long total = (unsigned long long)80 << 30;
    return Py_BuildValue("(KK)", total - allocated_bytes, total);
}

/* Where a copy's pointer lands: an allocation (its index) or pageable host
 * memory (-1); -2 when refused (reported). */
static int
locate(uintptr_t p, size_t n, const char *call, const char *role)
{
    int ai = find_alloc(p);
    if (ai < 0)
        return -1;
    Alloc *a = &allocs[ai];
    char al[200];
    describe_alloc(a, al, sizeof al);
    if (a->freed) {
        report("%s: the %s %#lx is in freed memory: %s, freed %s", call, role, (unsigned long)p, al, a->freed_by);
        return -2;
    }
    if (p + n > a->base + a->size) {
        report("%s: the %s range %#lx + %zu runs past the end of %s", call, role, (unsigned long)p, n, al);
        return -2;
    }
    return ai;
}

static int device_like(int ai) { return ai >= 0 && (allocs[ai].kind == K_DEVICE || allocs[ai].kind == K_MANAGED); }

/* A copy of n bytes on stream `s`: `sync_mode` 0 async (cudaMemcpyAsync),
 * 1 synchronous (cudaMemcpy on the legacy default stream). */
static PyObject *
copy_on(Stream *s, uintptr_t dst, uintptr_t src, size_t n, int kind, int sync_mode, const char *call)
{
    if (n == 0)
        Py_RETURN_NONE;
    int di = locate(dst, n, call, "destination"), si = locate(src, n, call, "source");
    if (di == -2 || si == -2)
        return rt_raise(cudaErrorInvalidValue);
    int dd = device_like(di), sd = device_like(si);
    int captured = capture_check(s, call);
    if (captured < 0 || (captured == 0 && sync_mode && unsafe_check(call) < 0))
        return NULL;
    if (captured) {
        char sn[96];
        if (di == -1 || si == -1)
            return forbidden(s->cap, cudaErrorStreamCaptureUnsupported, "%s of pageable host memory on %s, which "
                             "captures", call, stream_name(s, sn, sizeof sn));
        Node node = {.kind = OP_COPY, .dst = dst, .src = src, .n = n, .copy_kind = kind};
        capture_node(s, &node);
        Py_RETURN_NONE;
    }
    /* The side a kind names the device's must be memory a GPU addresses
     * (under unified addressing: device, managed or pinned memory). */
    if (((kind == MEMCPY_H2D || kind == MEMCPY_D2D) && di == -1) ||
        ((kind == MEMCPY_D2H || kind == MEMCPY_D2D) && si == -1))
        report("%s: kind %d names pageable host memory as a GPU's (source %s, destination %s)", call, kind,
               si == -1 ? "pageable" : kind_name[allocs[si].kind], di == -1 ? "pageable" : kind_name[allocs[di].kind]);
    char what[200], sn[96];
    snprintf(what, sizeof what, "%s of %zu bytes on %s", call, n, stream_name(s, sn, sizeof sn));
    char at[120];
    where(at, sizeof at);
    strncat(what, at, sizeof what - strlen(what) - 1);
    int pageable_src = si == -1, pageable_dst = di == -1;
    /* What completes before the call returns (CUDA's API synchronization behavior). */
    int host_waits_after = 0, stage = 0, wait_before = 0;
    if (!sd && !dd) {
        host_waits_after = 1;                  /* host to host: synchronous */
    } else if (sd && !dd) {
        host_waits_after = sync_mode || pageable_dst;  /* to the host: done on return (pageable: "might be synchronous") */
    } else if (!sd && dd) {
        if (pageable_src) {
            stage = 1;                         /* the source is staged when the call is made */
            wait_before = sync_mode;           /* cudaMemcpy: a stream sync first */
        } else {
            host_waits_after = sync_mode;      /* pinned to device: cudaMemcpy is synchronous */
        }
    }
    if (wait_before)
        host_waits(s, s->enqueued, &s->vc);
    Op *op = enqueue(s, OP_COPY, NULL, 0, NULL);
    op->n = n;
    op->dst = di >= 0 ? backing_of(di, dst) : (char *)dst;
    op->src = si >= 0 ? backing_of(si, src) : (const char *)src;
    if (stage) {
        op->staging = malloc(n);
        memcpy(op->staging, (const void *)src, n);
    }
    if (di >= 0) {
        check_access(di, dst, n, s->agent, &s->vc, 1, what);
        allocs[di].pending_w++;
        op->dst_alloc = allocs[di].id;
        reprotect(&allocs[di]);
    }
    if (si >= 0) {
        check_access(si, src, n, s->agent, &s->vc, 0, what);
        allocs[si].pending_r++;
        op->src_alloc = allocs[si].id;
        reprotect(&allocs[si]);
    }
    if (host_waits_after)
        host_waits(s, op->seq, &s->vc);
    Py_RETURN_NONE;
}

static PyObject *
sim_memcpy(intptr_t dst, intptr_t src, size_t n, int kind, int skip)
{
    ENTER(E_memcpy, skip, "memcpy", NULL);
    return copy_on(legacy[cur_dev], dst, src, n, kind, 1, "cudaMemcpy");
}

static PyObject *
memcpyAsync(intptr_t dst, intptr_t src, size_t n, int kind, intptr_t stream, int skip)
{
    ENTER(E_memcpyAsync, skip, "memcpyAsync", NULL);
    Stream *s = resolve_stream(stream, "cudaMemcpyAsync");
    if (s == NULL)
        return rt_raise(cudaErrorInvalidResourceHandle);
    return copy_on(s, dst, src, n, kind, 0, "cudaMemcpyAsync");
}

static PyObject *
memcpyPeer(intptr_t dst, int dd, intptr_t src, int sd, size_t n, int skip)
{
    ENTER(E_memcpyPeer, skip, "memcpyPeer", NULL);
    if (check_device(dd) < 0 || check_device(sd) < 0)
        return NULL;
    return copy_on(legacy[cur_dev], dst, src, n, MEMCPY_D2D, 1, "cudaMemcpyPeer");
}

static PyObject *
memcpyPeerAsync(intptr_t dst, int dd, intptr_t src, int sd, size_t n, intptr_t stream, int skip)
{
    ENTER(E_memcpyPeerAsync, skip, "memcpyPeerAsync", NULL);
    if (check_device(dd) < 0 || check_device(sd) < 0)
        return NULL;
    Stream *s = resolve_stream(stream, "cudaMemcpyPeerAsync");
    if (s == NULL)
        return rt_raise(cudaErrorInvalidResourceHandle);
    return copy_on(s, dst, src, n, MEMCPY_D2D, 0, "cudaMemcpyPeerAsync");
}

#define NOT_SIMULATED_COPY(name, ...)                      \
    static PyObject *name(__VA_ARGS__)                     \
    {                                                      \
        ENTER(E_##name, skip, #name, NULL);                \
        return unsimulated("runtime", #name);              \
    }

NOT_SIMULATED_COPY(memcpy2D, intptr_t a, size_t b, intptr_t c, size_t d, size_t e, size_t f, int g, int skip)
NOT_SIMULATED_COPY(memcpy2DAsync, intptr_t a, size_t b, intptr_t c, size_t d, size_t e, size_t f, int g, intptr_t h, int skip)
NOT_SIMULATED_COPY(memcpy2DFromArray, intptr_t a, size_t b, intptr_t c, size_t d, size_t e, size_t f, size_t g, int h, int skip)
NOT_SIMULATED_COPY(memcpy2DFromArrayAsync, intptr_t a, size_t b, intptr_t c, size_t d, size_t e, size_t f, size_t g, int h, intptr_t i, int skip)
NOT_SIMULATED_COPY(memcpy2DToArray, intptr_t a, size_t b, size_t c, intptr_t d, size_t e, size_t f, size_t g, int h, int skip)
NOT_SIMULATED_COPY(memcpy2DToArrayAsync, intptr_t a, size_t b, size_t c, intptr_t d, size_t e, size_t f, size_t g, int h, intptr_t i, int skip)
NOT_SIMULATED_COPY(memcpy3D, intptr_t a, int skip)
NOT_SIMULATED_COPY(memcpy3DAsync, intptr_t a, intptr_t b, int skip)

static PyObject *
set_on(Stream *s, uintptr_t p, int value, size_t n, int sync_mode, const char *call)
{
    if (n == 0)
        Py_RETURN_NONE;
    int di = locate(p, n, call, "destination");
    if (di < 0) {
        if (di == -1)
            report("%s of %#lx: not memory of the GPU, pinned or managed", call, (unsigned long)p);
        return rt_raise(cudaErrorInvalidValue);
    }
    int captured = capture_check(s, call);
    if (captured < 0 || (captured == 0 && sync_mode && unsafe_check(call) < 0))
        return NULL;
    if (captured) {
        Node node = {.kind = OP_MEMSET, .dst = p, .n = n, .value = value};
        capture_node(s, &node);
        Py_RETURN_NONE;
    }
    char what[200], sn[96], at[120];
    snprintf(what, sizeof what, "%s of %zu bytes on %s", call, n, stream_name(s, sn, sizeof sn));
    where(at, sizeof at);
    strncat(what, at, sizeof what - strlen(what) - 1);
    Op *op = enqueue(s, OP_MEMSET, NULL, 0, NULL);
    op->dst = backing_of(di, p);
    op->n = n;
    op->value = value;
    check_access(di, p, n, s->agent, &s->vc, 1, what);
    allocs[di].pending_w++;
    op->dst_alloc = allocs[di].id;
    reprotect(&allocs[di]);
    if (sync_mode && !device_like(di))
        host_waits(s, op->seq, &s->vc);  /* cudaMemset of pinned memory: synchronous */
    Py_RETURN_NONE;
}

static PyObject *
sim_memset(intptr_t p, int value, size_t n, int skip)
{
    ENTER(E_memset, skip, "memset", NULL);
    return set_on(legacy[cur_dev], p, value, n, 1, "cudaMemset");
}

static PyObject *
memsetAsync(intptr_t p, int value, size_t n, intptr_t stream, int skip)
{
    ENTER(E_memsetAsync, skip, "memsetAsync", NULL);
    Stream *s = resolve_stream(stream, "cudaMemsetAsync");
    if (s == NULL)
        return rt_raise(cudaErrorInvalidResourceHandle);
    return set_on(s, p, value, n, 0, "cudaMemsetAsync");
}

static PyObject *
memPrefetchAsync(intptr_t p, size_t n, int device, intptr_t stream, int skip)
{
    ENTER(E_memPrefetchAsync, skip, "memPrefetchAsync", NULL);
    if (resolve_stream(stream, "cudaMemPrefetchAsync") == NULL)
        return rt_raise(cudaErrorInvalidResourceHandle);
    Py_RETURN_NONE;
}

static PyObject *
memAdvise(intptr_t p, size_t n, int advice, int device, int skip)
{
    ENTER(E_memAdvise, skip, "memAdvise", NULL);
    Py_RETURN_NONE;
}

static PyObject *
pointerGetAttributes(intptr_t ptr, int skip)
{
    ENTER(E_pointerGetAttributes, skip, "pointerGetAttributes", NULL);
    int ai = find_alloc((uintptr_t)ptr);
    int type = MT_UNREGISTERED, device = -2;
    intptr_t dptr = 0, hptr = 0;
    if (ai >= 0 && !allocs[ai].freed) {
        Alloc *a = &allocs[ai];
        device = a->device;
        dptr = ptr;
        if (a->kind == K_DEVICE)
            type = MT_DEVICE;
        else if (a->kind == K_MANAGED)
            type = MT_MANAGED, hptr = ptr;
        else
            type = MT_HOST, hptr = ptr;
    }
    return PyObject_CallFunction(pointer_attributes, "inni", device, (Py_ssize_t)dptr, (Py_ssize_t)hptr, type);
}

static int
pointerGetMemoryType(intptr_t ptr, int skip)
{
    ENTER(E_pointerGetMemoryType, skip, "pointerGetMemoryType", -1);
    int ai = find_alloc((uintptr_t)ptr);
    if (ai < 0 || allocs[ai].freed)
        return MT_UNREGISTERED;
    return allocs[ai].kind == K_DEVICE ? MT_DEVICE : allocs[ai].kind == K_MANAGED ? MT_MANAGED : MT_HOST;
}

#define NOT_SIMULATED(ret, fail, name, ...)               \
    static ret name(__VA_ARGS__)                          \
    {                                                     \
        ENTER(E_##name, skip, #name, fail);               \
        unsimulated("runtime", #name);                    \
        return fail;                                      \
    }

NOT_SIMULATED(intptr_t, 0, deviceGetDefaultMemPool, int d, int skip)
NOT_SIMULATED(intptr_t, 0, deviceGetMemPool, int d, int skip)
NOT_SIMULATED(PyObject *, NULL, deviceSetMemPool, int d, intptr_t p, int skip)
NOT_SIMULATED(intptr_t, 0, memPoolCreate, PyObject *props, int skip)
NOT_SIMULATED(PyObject *, NULL, memPoolDestroy, intptr_t p, int skip)
NOT_SIMULATED(PyObject *, NULL, memPoolTrimTo, intptr_t p, size_t n, int skip)
NOT_SIMULATED(PyObject *, NULL, memPoolGetAttribute, intptr_t p, int a, int skip)
NOT_SIMULATED(PyObject *, NULL, memPoolSetAttribute, intptr_t p, int a, PyObject *v, int skip)

/* streams */

static intptr_t
make_stream(unsigned flags, int priority)
{
    return new_stream(S_USER, cur_dev, flags, priority)->handle;
}

static intptr_t
streamCreate(int skip)
{
    ENTER(E_streamCreate, skip, "streamCreate", 0);
    return make_stream(0, 0);
}

static intptr_t
streamCreateWithFlags(unsigned int flags, int skip)
{
    ENTER(E_streamCreateWithFlags, skip, "streamCreateWithFlags", 0);
    return make_stream(flags, 0);
}

static intptr_t
streamCreateWithPriority(unsigned int flags, int priority, int skip)
{
    ENTER(E_streamCreateWithPriority, skip, "streamCreateWithPriority", 0);
    return make_stream(flags, priority);
}

static unsigned int
streamGetFlags(intptr_t stream, int skip)
{
    ENTER(E_streamGetFlags, skip, "streamGetFlags", 0);
    Stream *s = resolve_stream(stream, "cudaStreamGetFlags");
    if (s == NULL) {
        rt_raise(cudaErrorInvalidResourceHandle);
        return 0;
    }
    return s->flags;
}

static int
streamGetPriority(intptr_t stream, int skip)
{
    ENTER(E_streamGetPriority, skip, "streamGetPriority", 0);
    Stream *s = resolve_stream(stream, "cudaStreamGetPriority");
    if (s == NULL) {
        rt_raise(cudaErrorInvalidResourceHandle);
        return 0;
    }
    return s->priority;
}

static PyObject *
streamDestroy(intptr_t stream, int skip)
{
    ENTER(E_streamDestroy, skip, "streamDestroy", NULL);
    Stream *s = resolve_stream(stream, "cudaStreamDestroy");
    if (s == NULL || s->kind != S_USER) {
        if (s != NULL)
            report("cudaStreamDestroy of a default stream (%#lx)", (unsigned long)stream);
        return rt_raise(cudaErrorInvalidResourceHandle);
    }
    s->destroyed = 1;  /* its queued work still runs */
    Py_RETURN_NONE;
}

static PyObject *
streamSynchronize(intptr_t stream, int skip)
{
    ENTER(E_streamSynchronize, skip, "streamSynchronize", NULL);
    Stream *s = resolve_stream(stream, "cudaStreamSynchronize");
    if (s == NULL)
        return rt_raise(cudaErrorInvalidResourceHandle);
    int status = sync_check(s, "cudaStreamSynchronize");
    if (status)
        return rt_raise(status);
    host_waits(s, s->enqueued, &s->vc);
    Py_RETURN_NONE;
}

static void
enqueue_host_fn(Stream *s, PyObject *fn, PyObject *arg, int style, intptr_t stream)
{
    Op *op = enqueue(s, OP_HOSTFN, NULL, 0, NULL);
    op->fn = Py_NewRef(fn);
    op->arg = Py_NewRef(arg);
    op->fn_style = style;
    op->fn_stream = stream;
}

static PyObject *
host_fn(intptr_t stream, PyObject *fn, PyObject *arg, int style, const char *call)
{
    Stream *s = resolve_stream(stream, call);
    if (s == NULL)
        return rt_raise(cudaErrorInvalidResourceHandle);
    int captured = capture_check(s, call);
    if (captured < 0)
        return NULL;
    if (captured && style == 3)
        return forbidden(s->cap, cudaErrorStreamCaptureUnsupported, "cudaStreamAddCallback on a capturing stream");
    if (captured) {
        Node node = {.kind = OP_HOSTFN, .fn = fn, .arg = arg, .fn_style = style, .fn_stream = stream};
        capture_node(s, &node);
        Py_RETURN_NONE;
    }
    enqueue_host_fn(s, fn, arg, style, stream);
    Py_RETURN_NONE;
}

static PyObject *
streamAddCallback(intptr_t stream, PyObject *callback, intptr_t arg, int skip, struct opt_flags *opt)
{
    ENTER(E_streamAddCallback, skip, "streamAddCallback", NULL);
    PyObject *a = PyLong_FromSsize_t(arg);
    if (a == NULL)
        return NULL;
    PyObject *r = host_fn(stream, callback, a, 3, "cudaStreamAddCallback");
    Py_DECREF(a);
    return r;
}

static PyObject *
launchHostFunc(intptr_t stream, PyObject *callback, intptr_t arg, int skip)
{
    ENTER(E_launchHostFunc, skip, "launchHostFunc", NULL);
    PyObject *a = PyLong_FromSsize_t(arg);
    if (a == NULL)
        return NULL;
    PyObject *r = host_fn(stream, callback, a, 1, "cudaLaunchHostFunc");
    Py_DECREF(a);
    return r;
}

static PyObject *
_launchHostFuncUnmanaged(intptr_t stream, PyObject *func_arg, int skip)
{
    ENTER(E__launchHostFuncUnmanaged, skip, "_launchHostFuncUnmanaged", NULL);
    if (!PyTuple_Check(func_arg) || PyTuple_GET_SIZE(func_arg) != 2) {
        PyErr_SetString(PyExc_TypeError, "func_arg: (callback, argument)");
        return NULL;
    }
    return host_fn(stream, PyTuple_GET_ITEM(func_arg, 0), PyTuple_GET_ITEM(func_arg, 1), 2, "cudaLaunchHostFunc");
}

static PyObject *
streamQuery(intptr_t stream, int skip)
{
    ENTER(E_streamQuery, skip, "streamQuery", NULL);
    Stream *s = resolve_stream(stream, "cudaStreamQuery");
    if (s == NULL)
        return PyLong_FromLong(cudaErrorInvalidResourceHandle);
    int status = sync_check(s, "cudaStreamQuery");
    if (status)
        return PyLong_FromLong(status);
    if (!settle(s, s->enqueued))
        return PyLong_FromLong(cudaErrorNotReady);
    vc_join(&host_vc, &s->vc);
    return PyLong_FromLong(cudaSuccess);
}

static PyObject *
streamWaitEvent(intptr_t stream, intptr_t event, int skip, struct opt_flags *opt)
{
    ENTER(E_streamWaitEvent, skip, "streamWaitEvent", NULL);
    Stream *s = resolve_stream(stream, "cudaStreamWaitEvent");
    Event *e = s ? resolve_event(event, "cudaStreamWaitEvent") : NULL;
    if (s == NULL || e == NULL)
        return rt_raise(cudaErrorInvalidResourceHandle);
    char sn[96];
    int captured = capture_check(s, "cudaStreamWaitEvent");
    if (captured < 0)
        return NULL;
    Capture *c = e->cap && e->cap->status != CS_NONE ? e->cap : NULL;  /* recorded in a capture not ended */
    if (captured) {
        if (c == s->cap) {  /* within the capture: an edge of the graph; a join when of another stream */
            Node node = {.kind = OP_WAIT};
            capture_node(s, &node);
            if (e->cap_stream != s && e->cap_pos > e->cap_stream->cap_joined)
                e->cap_stream->cap_joined = e->cap_pos;
            Py_RETURN_NONE;
        }
        if (c) {
            invalidate(c);
            return forbidden(s->cap, cudaErrorStreamCaptureMerge, "cudaStreamWaitEvent of %s, which captures, on an "
                             "event recorded in another capture (#%d)", stream_name(s, sn, sizeof sn), c->id);
        }
        if (e->recorded || e->cap)
            return forbidden(s->cap, cudaErrorStreamCaptureIsolation, "cudaStreamWaitEvent of %s, which captures, on "
                             "event %#lx recorded outside the capture", stream_name(s, sn, sizeof sn),
                             (unsigned long)event);
        Py_RETURN_NONE;  /* never recorded: nothing to wait for */
    }
    if (c) {  /* cross-stream capture: `s` joins the capture */
        if (c->status == CS_INVALIDATED)
            return rt_raise(cudaErrorStreamCaptureInvalidated);
        if (s->kind == S_LEGACY)
            return forbidden(c, cudaErrorStreamCaptureImplicit, "cudaStreamWaitEvent of %s on an event recorded in a "
                             "capture", stream_name(s, sn, sizeof sn));
        s->cap = c;
        s->cap_count = s->cap_joined = 0;
        Node node = {.kind = OP_WAIT};
        capture_node(s, &node);
        Py_RETURN_NONE;
    }
    if (e->cap) {
        report("cudaStreamWaitEvent of %s on event %#lx, last recorded in stream capture #%d (CUDA fails it with "
               "error %d)", stream_name(s, sn, sizeof sn), (unsigned long)event, e->cap->id, cudaErrorCapturedEvent);
        return rt_raise(cudaErrorCapturedEvent);
    }
    if (e->recorded)  /* an event never recorded: nothing to wait for */
        enqueue(s, OP_WAIT, e->s, e->pos, &e->vc);
    Py_RETURN_NONE;
}

struct opt_mode {
    int n;
    int mode;
};

static PyObject *
streamBeginCapture(intptr_t stream, int skip, struct opt_mode *opt)
{
    ENTER(E_streamBeginCapture, skip, "streamBeginCapture", NULL);
    int mode = opt && opt->n >= 1 ? opt->mode : CAPTURE_RELAXED;  /* CuPy's default */
    Stream *s = resolve_stream(stream, "cudaStreamBeginCapture");
    if (s == NULL)
        return rt_raise(cudaErrorInvalidResourceHandle);
    if (mode < CAPTURE_GLOBAL || mode > CAPTURE_RELAXED)
        return rt_raise(cudaErrorInvalidValue);
    if (s->kind == S_LEGACY)  /* the legacy stream cannot be captured */
        return rt_raise(cudaErrorStreamCaptureUnsupported);
    if (s->cap)
        return rt_raise(cudaErrorIllegalState);
    if (ncaptures == capcaptures) {
        capcaptures = capcaptures ? 2 * capcaptures : 16;
        captures = realloc(captures, capcaptures * sizeof *captures);
    }
    Capture *c = calloc(1, sizeof *c);
    c->id = ncaptures + 1;
    c->mode = mode;
    c->status = CS_ACTIVE;
    c->origin = s;
    c->thread = pthread_self();
    captures[ncaptures++] = c;
    s->cap = c;
    s->cap_count = s->cap_joined = 0;
    Py_RETURN_NONE;
}

/* The graph of the capture `stream` began; the capture ends, failed or not. */
static intptr_t
streamEndCapture(intptr_t stream, int skip)
{
    ENTER(E_streamEndCapture, skip, "streamEndCapture", 0);
    Stream *s = resolve_stream(stream, "cudaStreamEndCapture");
    if (s == NULL) {
        rt_raise(cudaErrorInvalidResourceHandle);
        return 0;
    }
    Capture *c = s->cap;
    if (c == NULL) {
        rt_raise(cudaErrorIllegalState);
        return 0;
    }
    if (c->origin != s) {
        forbidden(c, cudaErrorStreamCaptureUnmatched, "cudaStreamEndCapture on a stream that joined capture #%d, "
                  "not the one that began it", c->id);
        return 0;
    }
    if (c->status == CS_INVALIDATED) {
        end_capture(c);
        nodes_clear(&c->nodes);
        rt_raise(cudaErrorStreamCaptureInvalidated);
        return 0;
    }
    for (int i = 0; i < nstreams; i++) {
        Stream *o = streams[i];
        if (o->cap == c && o != s && o->cap_count > o->cap_joined) {
            char sn[96];
            report("cudaStreamEndCapture of capture #%d: %s has captured work the capturing stream never waited "
                   "for (CUDA fails it with error %d)", c->id, stream_name(o, sn, sizeof sn),
                   cudaErrorStreamCaptureUnjoined);
            end_capture(c);
            nodes_clear(&c->nodes);
            rt_raise(cudaErrorStreamCaptureUnjoined);
            return 0;
        }
    }
    end_capture(c);
    intptr_t g = new_graph(GRAPH_BASE, &c->nodes);
    nodes_clear(&c->nodes);
    return g;
}

/* CuPy's streamIsCapturing: False (none), True (active), and RuntimeError
 * for an invalidated capture; on the legacy stream while a blocking stream
 * of its device captures, cudaErrorStreamCaptureImplicit. */
static int
streamIsCapturing(intptr_t stream, int skip)
{
    ENTER(E_streamIsCapturing, skip, "streamIsCapturing", -1);
    Stream *s = resolve_stream(stream, "cudaStreamIsCapturing");
    if (s == NULL) {
        rt_raise(cudaErrorInvalidResourceHandle);
        return -1;
    }
    if (s->kind == S_LEGACY && blocking_capture_on(s->device)) {
        rt_raise(cudaErrorStreamCaptureImplicit);
        return -1;
    }
    if (s->cap && s->cap->status == CS_INVALIDATED) {
        PyErr_SetString(PyExc_RuntimeError, "the stream was capturing, but an error has invalidated the capture "
                        "sequence");
        return -1;
    }
    return s->cap != NULL;
}

/* events */

static intptr_t
make_event(unsigned flags)
{
    if (nevents == capevents) {
        capevents = capevents ? 2 * capevents : 64;
        events = realloc(events, capevents * sizeof *events);
    }
    Event *e = calloc(1, sizeof *e);
    e->handle = EVENT_BASE + (intptr_t)nevents * HANDLE_STEP;
    e->device = cur_dev;
    e->flags = flags;
    events[nevents++] = e;
    return e->handle;
}

static intptr_t
eventCreate(int skip)
{
    ENTER(E_eventCreate, skip, "eventCreate", 0);
    return make_event(0);
}

static intptr_t
eventCreateWithFlags(unsigned int flags, int skip)
{
    ENTER(E_eventCreateWithFlags, skip, "eventCreateWithFlags", 0);
    return make_event(flags);
}

static PyObject *
eventDestroy(intptr_t event, int skip)
{
    ENTER(E_eventDestroy, skip, "eventDestroy", NULL);
    Event *e = resolve_event(event, "cudaEventDestroy");
    if (e == NULL)
        return rt_raise(cudaErrorInvalidResourceHandle);
    e->destroyed = 1;
    Py_RETURN_NONE;
}

static float
eventElapsedTime(intptr_t start, intptr_t end, int skip)
{
    ENTER(E_eventElapsedTime, skip, "eventElapsedTime", 0);
    Event *a = resolve_event(start, "cudaEventElapsedTime"), *b = a ? resolve_event(end, "cudaEventElapsedTime") : NULL;
    if (a == NULL || b == NULL || (a->flags & EVENT_DISABLE_TIMING) || (b->flags & EVENT_DISABLE_TIMING)) {
        rt_raise(cudaErrorInvalidResourceHandle);
        return 0;
    }
    int status = captured_event_check(a, "cudaEventElapsedTime");
    if (status == 0)
        status = captured_event_check(b, "cudaEventElapsedTime");
    if (status) {
        rt_raise(status);
        return 0;
    }
    if (!a->recorded || !b->recorded || a->s->executed < a->pos || b->s->executed < b->pos) {
        rt_raise(cudaErrorNotReady);
        return 0;
    }
    return 0.5f;
}

static PyObject *
eventQuery(intptr_t event, int skip)
{
    ENTER(E_eventQuery, skip, "eventQuery", NULL);
    Event *e = resolve_event(event, "cudaEventQuery");
    if (e == NULL)
        return PyLong_FromLong(cudaErrorInvalidResourceHandle);
    int status = captured_event_check(e, "cudaEventQuery");
    if (status)
        return PyLong_FromLong(status);
    if (!e->recorded)
        return PyLong_FromLong(cudaSuccess);
    if (!settle(e->s, e->pos))
        return PyLong_FromLong(cudaErrorNotReady);
    vc_join(&host_vc, &e->vc);
    return PyLong_FromLong(cudaSuccess);
}

static PyObject *
eventRecord(intptr_t event, intptr_t stream, int skip)
{
    ENTER(E_eventRecord, skip, "eventRecord", NULL);
    Event *e = resolve_event(event, "cudaEventRecord");
    Stream *s = e ? resolve_stream(stream, "cudaEventRecord") : NULL;
    if (e == NULL || s == NULL)
        return rt_raise(cudaErrorInvalidResourceHandle);
    if (e->device != s->device) {
        char sn[96];
        report("cudaEventRecord of event %#lx, made on GPU %d, on %s: an event is recorded on a stream of its "
               "own device", (unsigned long)event, e->device, stream_name(s, sn, sizeof sn));
        return rt_raise(cudaErrorInvalidResourceHandle);
    }
    int captured = capture_check(s, "cudaEventRecord");
    if (captured < 0)
        return NULL;
    if (captured) {
        Node node = {.kind = OP_MARK};
        capture_node(s, &node);
        e->cap = s->cap;
        e->cap_stream = s;
        e->cap_pos = s->cap_count;
        Py_RETURN_NONE;
    }
    e->cap = NULL;
    Op *op = enqueue(s, OP_MARK, NULL, 0, NULL);
    vc_free(&e->vc);
    e->vc = vc_copy(&s->vc);
    e->s = s;
    e->pos = op->seq;
    e->recorded = 1;
    Py_RETURN_NONE;
}

static PyObject *
eventSynchronize(intptr_t event, int skip)
{
    ENTER(E_eventSynchronize, skip, "eventSynchronize", NULL);
    Event *e = resolve_event(event, "cudaEventSynchronize");
    if (e == NULL)
        return rt_raise(cudaErrorInvalidResourceHandle);
    int status = captured_event_check(e, "cudaEventSynchronize");
    if (status)
        return rt_raise(status);
    if (e->recorded)
        host_waits(e->s, e->pos, &e->vc);
    Py_RETURN_NONE;
}

/* util, texture, surfaces, graphs, profiler */

static PyObject *
_ensure_context(void)
{
    ENTER(E__ensure_context, 0, "_ensure_context", NULL);
    Py_RETURN_NONE;
}

typedef struct { int f[5]; } channel_desc_t;  /* cudaChannelFormatDesc: returned through memory */
typedef struct { char b[24]; } big_t;         /* at most the size of each struct returned below */

static channel_desc_t
getChannelDesc(intptr_t array)
{
    channel_desc_t out = {{0}};
    if (enter(E_getChannelDesc, 0, "getChannelDesc") == 0)
        unsimulated("runtime", "getChannelDesc");
    return out;
}

#define NOT_SIMULATED_STRUCT(name, ...)                  \
    static big_t name(__VA_ARGS__)                       \
    {                                                    \
        big_t out = {{0}};                               \
        if (enter(E_##name, 0, #name) == 0)              \
            unsimulated("runtime", #name);               \
        return out;                                      \
    }

NOT_SIMULATED_STRUCT(getTextureObjectResourceDesc, uintmax_t t)
NOT_SIMULATED_STRUCT(getTextureObjectTextureDesc, uintmax_t t)
NOT_SIMULATED_STRUCT(make_Extent, size_t w, size_t h, size_t d)
NOT_SIMULATED_STRUCT(make_Pos, size_t x, size_t y, size_t z)
NOT_SIMULATED_STRUCT(make_PitchedPtr, intptr_t d, size_t p, size_t x, size_t y)

NOT_SIMULATED(uintmax_t, 0, createTextureObject, intptr_t a, intptr_t b, int skip)
NOT_SIMULATED(PyObject *, NULL, destroyTextureObject, uintmax_t t, int skip)
NOT_SIMULATED(uintmax_t, 0, createSurfaceObject, intptr_t a, int skip)
NOT_SIMULATED(PyObject *, NULL, destroySurfaceObject, uintmax_t t, int skip)
static PyObject *
graphDestroy(intptr_t graph, int skip)
{
    ENTER(E_graphDestroy, skip, "graphDestroy", NULL);
    Graph *g = resolve_graph(GRAPH_BASE, graph, "cudaGraphDestroy");
    if (g == NULL)
        return rt_raise(cudaErrorInvalidResourceHandle);
    g->destroyed = 1;
    nodes_clear(&g->nodes);
    Py_RETURN_NONE;
}

static PyObject *
graphExecDestroy(intptr_t exec, int skip)
{
    ENTER(E_graphExecDestroy, skip, "graphExecDestroy", NULL);
    Graph *g = resolve_graph(EXEC_BASE, exec, "cudaGraphExecDestroy");
    if (g == NULL)
        return rt_raise(cudaErrorInvalidResourceHandle);
    g->destroyed = 1;  /* launches already made still run: their work is queued */
    nodes_clear(&g->nodes);
    Py_RETURN_NONE;
}

/* An executable graph: a copy of the graph's nodes. */
static intptr_t
graphInstantiate(intptr_t graph, int skip)
{
    ENTER(E_graphInstantiate, skip, "graphInstantiate", 0);
    Graph *g = resolve_graph(GRAPH_BASE, graph, "cudaGraphInstantiate");
    if (g == NULL) {
        rt_raise(cudaErrorInvalidResourceHandle);
        return 0;
    }
    return new_graph(EXEC_BASE, &g->nodes);
}

/* The graph's nodes replayed in order on `stream`, as work enqueued now
 * (judged by the checker as any other); launched into a capture, they are
 * nodes of that capture. */
static PyObject *
graphLaunch(intptr_t exec, intptr_t stream, int skip)
{
    ENTER(E_graphLaunch, skip, "graphLaunch", NULL);
    Graph *g = resolve_graph(EXEC_BASE, exec, "cudaGraphLaunch");
    Stream *s = g ? resolve_stream(stream, "cudaGraphLaunch") : NULL;
    if (g == NULL || s == NULL)
        return rt_raise(cudaErrorInvalidResourceHandle);
    int captured = capture_check(s, "cudaGraphLaunch");
    if (captured < 0)
        return NULL;
    for (int i = 0; i < g->nodes.n; i++) {
        Node *n = &g->nodes.v[i];
        if (captured) {
            if (n->kind == OP_COPY || n->kind == OP_MEMSET || n->kind == OP_HOSTFN)
                capture_node(s, n);
            continue;
        }
        PyObject *r = NULL;
        if (n->kind == OP_COPY)
            r = copy_on(s, n->dst, n->src, n->n, n->copy_kind, 0, "cudaGraphLaunch's copy node");
        else if (n->kind == OP_MEMSET)
            r = set_on(s, n->dst, n->value, n->n, 0, "cudaGraphLaunch's memset node");
        else if (n->kind == OP_HOSTFN)
            enqueue_host_fn(s, n->fn, n->arg, n->fn_style, stream), r = Py_NewRef(Py_None);
        else
            continue;
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
    }
    Py_RETURN_NONE;
}

static PyObject *
graphUpload(intptr_t exec, intptr_t stream, int skip)
{
    ENTER(E_graphUpload, skip, "graphUpload", NULL);
    Graph *g = resolve_graph(EXEC_BASE, exec, "cudaGraphUpload");
    Stream *s = g ? resolve_stream(stream, "cudaGraphUpload") : NULL;
    if (g == NULL || s == NULL)
        return rt_raise(cudaErrorInvalidResourceHandle);
    if (capture_check(s, "cudaGraphUpload") < 0)
        return NULL;
    Py_RETURN_NONE;
}
NOT_SIMULATED(PyObject *, NULL, graphDebugDotPrint, intptr_t g, PyObject *path, unsigned int flags, int skip)

static PyObject *
profilerStart(int skip)
{
    ENTER(E_profilerStart, skip, "profilerStart", NULL);
    Py_RETURN_NONE;
}

static PyObject *
profilerStop(int skip)
{
    ENTER(E_profilerStop, skip, "profilerStop", NULL);
    Py_RETURN_NONE;
}

/* --- the driver entries ------------------------------------------------------------ */

static intptr_t
ctxGetCurrent(int skip)
{
    ENTER(E_ctxGetCurrent, skip, "ctxGetCurrent", 0);
    return CONTEXT_BASE + (intptr_t)cur_dev * HANDLE_STEP;
}

static PyObject *
ctxSetCurrent(intptr_t ctx, int skip)
{
    ENTER(E_ctxSetCurrent, skip, "ctxSetCurrent", NULL);
    intptr_t off = ctx - CONTEXT_BASE;
    if (ctx == 0)
        Py_RETURN_NONE;
    if (off < 0 || off % HANDLE_STEP || off / HANDLE_STEP >= ndev) {
        report("driver.ctxSetCurrent of an unknown context %#lx", (unsigned long)ctx);
        PyErr_Format(driver_error, "CUDA_ERROR_INVALID_CONTEXT (simulated)");
        return NULL;
    }
    cur_dev = (int)(off / HANDLE_STEP);
    Py_RETURN_NONE;
}

static int
ctxGetDevice(int skip)
{
    ENTER(E_ctxGetDevice, skip, "ctxGetDevice", -1);
    return cur_dev;
}

static intptr_t
streamGetCtx(intptr_t stream, int skip)
{
    ENTER(E_streamGetCtx, skip, "streamGetCtx", 0);
    Stream *s = resolve_stream(stream, "cuStreamGetCtx");
    if (s == NULL) {
        PyErr_Format(driver_error, "CUDA_ERROR_INVALID_HANDLE (simulated)");
        return 0;
    }
    return CONTEXT_BASE + (intptr_t)s->device * HANDLE_STEP;
}

static PyObject *
get_build_version(int skip)
{
    ENTER(E_get_build_version, skip, "get_build_version", NULL);
    return PyLong_FromLong(build_version);
}

#define DRIVER_NOT_SIMULATED(ret, fail, name, ...)        \
    static ret name(__VA_ARGS__)                          \
    {                                                     \
        ENTER(E_##name, skip, #name, fail);               \
        unsimulated("driver", #name);                     \
        return fail;                                      \
    }
#define DRIVER_NO_KERNELS(ret, fail, name, ...)           \
    static ret name(__VA_ARGS__)                          \
    {                                                     \
        ENTER(E_##name, skip, #name, fail);               \
        no_kernels(#name);                                \
        return fail;                                      \
    }

DRIVER_NOT_SIMULATED(intptr_t, 0, ctxCreate, int device, int skip)
DRIVER_NOT_SIMULATED(PyObject *, NULL, ctxDestroy, intptr_t ctx, int skip)
DRIVER_NOT_SIMULATED(PyObject *, NULL, devicePrimaryCtxRelease, int device, int skip)
DRIVER_NO_KERNELS(int, -1, funcGetAttribute, int attr, intptr_t f, int skip)
DRIVER_NO_KERNELS(PyObject *, NULL, funcSetAttribute, intptr_t f, int attr, int value, int skip)
DRIVER_NO_KERNELS(PyObject *, NULL, launchCooperativeKernel, intptr_t f, unsigned a, unsigned b, unsigned c,
                  unsigned d, unsigned e, unsigned g, unsigned h, intptr_t s, intptr_t args, int skip)
DRIVER_NO_KERNELS(PyObject *, NULL, launchKernel, intptr_t f, unsigned a, unsigned b, unsigned c, unsigned d,
                  unsigned e, unsigned g, unsigned h, intptr_t s, intptr_t args, intptr_t extra, int skip)
DRIVER_NO_KERNELS(PyObject *, NULL, linkAddData, intptr_t st, int t, PyObject *d, PyObject *n, int skip)
DRIVER_NO_KERNELS(PyObject *, NULL, linkAddFile, intptr_t st, int t, PyObject *p, int skip)
DRIVER_NO_KERNELS(PyObject *, NULL, linkComplete, intptr_t st, int skip)
DRIVER_NO_KERNELS(intptr_t, 0, linkCreate, int skip)
DRIVER_NO_KERNELS(PyObject *, NULL, linkDestroy, intptr_t st, int skip)
DRIVER_NO_KERNELS(intptr_t, 0, moduleGetFunction, intptr_t m, PyObject *name, int skip)
DRIVER_NO_KERNELS(intptr_t, 0, moduleGetGlobal, intptr_t m, PyObject *name, int skip)
DRIVER_NO_KERNELS(intptr_t, 0, moduleLoad, PyObject *file, int skip)
DRIVER_NO_KERNELS(intptr_t, 0, moduleLoadData, PyObject *data, int skip)
DRIVER_NO_KERNELS(PyObject *, NULL, moduleUnload, intptr_t m, int skip)
DRIVER_NO_KERNELS(int, -1, occupancyMaxActiveBlocksPerMultiprocessor, intptr_t f, int b, size_t s, int skip)
DRIVER_NO_KERNELS(PyObject *, NULL, occupancyMaxPotentialBlockSize, intptr_t f, size_t s, int l, int skip)

/* --- the table of entries: name, C signature (as CuPy 14's Cython writes it), address --- */

#define OPT(fn) "struct __pyx_opt_args_13cupy_backends_4cuda_3api_7runtime_" fn " *__pyx_optional_args"
#define OBJ(cls) "struct __pyx_obj_13cupy_backends_4cuda_3api_7runtime_" cls " *"
#define SKIP "int __pyx_skip_dispatch"

enum { K_FUNC = 0, K_CDEF = 1, K_VAR = 2 };
typedef struct {
    int module;  /* 0 runtime, 1 driver */
    const char *name, *signature;
    void *address;
    int kind;
} Entry;

static const Entry entry_table[] = {
#define F(name, sig) {0, #name, sig, (void *)name, K_FUNC},
#define FA(name, cname, sig) {0, #name, sig, (void *)cname, K_FUNC},
#define C(name, sig) {0, #name, sig, (void *)name, K_CDEF},
#define V(name, var) {0, #name, "int", (void *)&var, K_VAR},
#define D(name, sig) {1, #name, sig, (void *)name, K_FUNC},
#include "table.h"
#undef F
#undef FA
#undef C
#undef V
#undef D
};
#define N_ENTRIES ((int)(sizeof entry_table / sizeof entry_table[0]))

/* --- forwarding: the entries the compiled core binds, calling a Python object -------- */
/* For tests on the CPU that record the core's calls with a stand-in whose
 * methods are CuPy's runtime functions (getDevice, setDevice, ...). */

static PyObject *forward_target;

static PyObject *
forward(const char *method, const char *fmt, ...)
{
    if (forward_target == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "simcuda: no forwarding target");
        return NULL;
    }
    PyObject *target = Py_NewRef(forward_target);
    PyObject *fn = PyObject_GetAttrString(target, method);
    Py_DECREF(target);
    if (fn == NULL)
        return NULL;
    va_list ap;
    va_start(ap, fmt);
    PyObject *args = Py_VaBuildValue(fmt, ap);
    va_end(ap);
    if (args == NULL) {
        Py_DECREF(fn);
        return NULL;
    }
    PyObject *r = PyObject_CallObject(fn, args);
    Py_DECREF(fn);
    Py_DECREF(args);
    return r;
}

static int
fw_getDevice(int skip)
{
    PyObject *r = forward("getDevice", "()");
    if (r == NULL)
        return -1;
    long d = PyLong_AsLong(r);
    Py_DECREF(r);
    return (int)d;
}

static PyObject *fw_setDevice(int device, int skip) { return forward("setDevice", "(i)", device); }
static PyObject *fw_eventRecord(intptr_t e, intptr_t s, int skip) { return forward("eventRecord", "(nn)", (Py_ssize_t)e, (Py_ssize_t)s); }

static PyObject *
fw_streamWaitEvent(intptr_t s, intptr_t e, int skip, struct opt_flags *opt)
{
    return forward("streamWaitEvent", "(nnI)", (Py_ssize_t)s, (Py_ssize_t)e, opt && opt->n >= 1 ? opt->flags : 0u);
}

static PyObject *
fw_memcpyAsync(intptr_t d, intptr_t s, size_t n, int kind, intptr_t stream, int skip)
{
    return forward("memcpyAsync", "(nnnin)", (Py_ssize_t)d, (Py_ssize_t)s, (Py_ssize_t)n, kind, (Py_ssize_t)stream);
}

static PyObject *fw_streamSynchronize(intptr_t s, int skip) { return forward("streamSynchronize", "(n)", (Py_ssize_t)s); }

static int
fw_streamIsCapturing(intptr_t s, int skip)
{
    PyObject *r = forward("streamIsCapturing", "(n)", (Py_ssize_t)s);
    if (r == NULL)
        return 0; /* except *: the error is the answer */
    int capturing = PyObject_IsTrue(r);
    Py_DECREF(r);
    return capturing < 0 ? 0 : capturing;
}

static const struct {
    const char *name;
    void *address;
} forwarded[] = {
    {"getDevice", (void *)fw_getDevice},         {"setDevice", (void *)fw_setDevice},
    {"eventRecord", (void *)fw_eventRecord},     {"streamWaitEvent", (void *)fw_streamWaitEvent},
    {"memcpyAsync", (void *)fw_memcpyAsync},     {"streamSynchronize", (void *)fw_streamSynchronize},
    {"streamIsCapturing", (void *)fw_streamIsCapturing},
};

static const char *
signature_of(int module, const char *name)
{
    for (int i = 0; i < N_ENTRIES; i++)
        if (entry_table[i].module == module && strcmp(entry_table[i].name, name) == 0)
            return entry_table[i].signature;
    return NULL;
}

/* --- SIGSEGV: a host access of memory it may not touch now ---------------------------- */

static struct sigaction previous_segv;

static void
on_segv(int sig, siginfo_t *info, void *context)
{
    uintptr_t addr = (uintptr_t)info->si_addr;
    int write = 0;
#if defined(__x86_64__)
    write = (((ucontext_t *)context)->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#endif
    lock();
    Alloc *a = NULL;
    for (int i = nallocs - 1; i >= 0; i--)
        if (allocs[i].kind != K_REGISTERED && addr >= allocs[i].base && addr < allocs[i].base + allocs[i].mapped) {
            a = &allocs[i];
            break;
        }
    if (a == NULL || a->prot == (PROT_READ | PROT_WRITE) || (a->prot == PROT_READ && !write && !a->freed)) {
        unlock();
        sigaction(SIGSEGV, &previous_segv, NULL);  /* not ours: the fault again, to the handler before */
        return;
    }
    int n = atomic_fetch_add(&nfaults, 1);
    if (n < 64) {
        Fault *f = &faults[n];
        f->what = a->freed ? 3 : a->kind == K_DEVICE ? 1 : 2;
        f->write = write;
        f->addr = addr;
        f->base = a->base;
        f->size = a->size;
        f->pending_w = a->pending_w;
        f->pending_r = a->pending_r;
        f->kind = a->kind;
        f->device = a->device;
    }
    if (a->freed) {
        /* Fresh memory where the freed was, so that the program goes on. */
        mmap((void *)a->base, a->mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        a->prot = PROT_READ | PROT_WRITE;
    } else {
        if (a->kind == K_DEVICE)
            a->host_touched = 1;
        else
            a->raced = 1;
        mprotect((void *)a->base, a->mapped, PROT_READ | PROT_WRITE);
        a->prot = PROT_READ | PROT_WRITE;
    }
    unlock();
}

static struct sigaction our_segv;

/* Our SIGSEGV handler in place, the one before it kept for faults that are
 * not ours: another one installed since (pytest's faulthandler) is put
 * after it. */
static void
ensure_handler(void)
{
    struct sigaction now;
    if (sigaction(SIGSEGV, NULL, &now) == 0 && now.sa_sigaction != on_segv)
        sigaction(SIGSEGV, &our_segv, &previous_segv);
}

static void
collect_faults(void)
{
    int n = atomic_exchange(&nfaults, 0);
    if (n > 64)
        n = 64;
    for (int i = 0; i < n; i++) {
        Fault *f = &faults[i];
        char msg[600];
        if (f->what == 1)
            snprintf(msg, sizeof msg,
                     "simcuda: the host %s device memory of GPU %d at %#lx (allocation of %zu bytes at %#lx): "
                     "device memory is no host memory", f->write ? "wrote" : "read", f->device,
                     (unsigned long)f->addr, f->size, (unsigned long)f->base);
        else if (f->what == 3)
            snprintf(msg, sizeof msg, "simcuda: the host %s freed %s memory at %#lx (allocation of %zu bytes at %#lx)",
                     f->write ? "wrote" : "read", kind_name[f->kind], (unsigned long)f->addr, f->size,
                     (unsigned long)f->base);
        else
            snprintf(msg, sizeof msg,
                     "simcuda: the host %s %s memory at %#lx (allocation of %zu bytes at %#lx) while queued work "
                     "still %s it (%u queued write(s), %u read(s)): the host never waited for that work",
                     f->write ? "wrote" : "read", kind_name[f->kind], (unsigned long)f->addr, f->size,
                     (unsigned long)f->base, f->pending_w ? "writes" : "reads", f->pending_w, f->pending_r);
        PyObject *s = PyUnicode_FromString(msg);
        if (s == NULL || PyList_Append(reports, s) < 0)
            PyErr_Clear();
        Py_XDECREF(s);
    }
}

/* --- the module ------------------------------------------------------------------------- */

static void
default_attributes(void)
{
    for (int d = 0; d < MAX_DEVICES; d++) {
        int *at = attributes[d];
        memset(at, 0, sizeof attributes[d]);
        at[1] = 1024;      /* MaxThreadsPerBlock */
        at[2] = at[3] = 1024;
        at[4] = 64;
        at[5] = 2147483647;
        at[6] = at[7] = 65535;
        at[8] = 49152;     /* MaxSharedMemoryPerBlock */
        at[9] = 65536;
        at[10] = 32;       /* WarpSize */
        at[12] = 65536;
        at[13] = 1980000;  /* ClockRate, kHz */
        at[14] = 512;
        at[15] = 1;
        at[16] = 132;      /* MultiProcessorCount */
        at[19] = 1;        /* CanMapHostMemory */
        at[31] = 1;        /* ConcurrentKernels */
        at[36] = 2619000;
        at[37] = 5120;
        at[38] = 50 << 20;
        at[39] = 2048;
        at[40] = 2;        /* AsyncEngineCount */
        at[41] = 1;        /* UnifiedAddressing */
        at[50] = d + 1;    /* PciBusId */
        at[75] = 9;        /* ComputeCapabilityMajor */
        at[76] = 0;
        at[81] = 233472;
        at[82] = 65536;
        at[83] = 1;        /* ManagedMemory */
        at[86] = 1;
        at[89] = 1;        /* ConcurrentManagedAccess */
        at[97] = 232448;   /* MaxSharedMemoryPerBlockOptin */
        at[115] = 1;       /* MemoryPoolsSupported */
    }
}

static PyObject *
sim_configure(PyObject *mod, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"devices", "runtime_error", "driver_error", "not_simulated", "pointer_attributes",
                         "runtime_version", "driver_version", "build_version", NULL};
    int devices = 2;
    PyObject *rte, *dre, *ns, *pa;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iOOOO|iii", kw, &devices, &rte, &dre, &ns, &pa,
                                     &runtime_version, &driver_version, &build_version))
        return NULL;
    if (configured) {
        PyErr_SetString(PyExc_RuntimeError, "simcuda is configured once per process");
        return NULL;
    }
    if (devices < 1 || devices > MAX_DEVICES) {
        PyErr_Format(PyExc_ValueError, "devices must be within [1, %d]", MAX_DEVICES);
        return NULL;
    }
    ndev = devices;
    runtime_error = Py_NewRef(rte);
    driver_error = Py_NewRef(dre);
    not_simulated = Py_NewRef(ns);
    pointer_attributes = Py_NewRef(pa);
    for (int d = 0; d < ndev; d++)
        legacy[d] = new_stream(S_LEGACY, d, 0, 0);
    memset(&our_segv, 0, sizeof our_segv);
    our_segv.sa_sigaction = on_segv;
    our_segv.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&our_segv.sa_mask);
    if (sigaction(SIGSEGV, &our_segv, &previous_segv) < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    configured = 1;
    Py_RETURN_NONE;
}

/* entries() -> ((module, name, signature, address, kind), ...): what the simulator implements. */
static PyObject *
sim_entries(PyObject *mod, PyObject *unused)
{
    PyObject *out = PyTuple_New(N_ENTRIES);
    if (out == NULL)
        return NULL;
    for (int i = 0; i < N_ENTRIES; i++) {
        const Entry *e = &entry_table[i];
        PyObject *row = Py_BuildValue("(sssNi)", e->module ? "driver" : "runtime", e->name, e->signature,
                                      PyLong_FromVoidPtr(e->address), e->kind);
        if (row == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, row);
    }
    return out;
}

/* capi(module) -> {name: capsule}: the __pyx_capi__ of the simulated module. */
static PyObject *
sim_capi(PyObject *mod, PyObject *which)
{
    const char *name = PyUnicode_AsUTF8(which);
    if (name == NULL)
        return NULL;
    int module = strcmp(name, "driver") == 0;
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    for (int i = 0; i < N_ENTRIES; i++) {
        const Entry *e = &entry_table[i];
        if (e->module != module)
            continue;
        PyObject *cap = PyCapsule_New(e->address, e->signature, NULL);
        if (cap == NULL || PyDict_SetItemString(out, e->name, cap) < 0) {
            Py_XDECREF(cap);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(cap);
    }
    return out;
}

/* forwarding_capi(target) -> {name: capsule}: the entries the compiled core
 * binds, each calling target's method of that name (None: no target). */
static PyObject *
sim_forwarding_capi(PyObject *mod, PyObject *target)
{
    Py_XSETREF(forward_target, target == Py_None ? NULL : Py_NewRef(target));
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++) {
        PyObject *cap = PyCapsule_New(forwarded[i].address, signature_of(0, forwarded[i].name), NULL);
        if (cap == NULL || PyDict_SetItemString(out, forwarded[i].name, cap) < 0) {
            Py_XDECREF(cap);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(cap);
    }
    return out;
}

static PyObject *
sim_take_reports(PyObject *mod, PyObject *unused)
{
    collect_faults();
    PyObject *out = PyList_GetSlice(reports, 0, PyList_GET_SIZE(reports));
    if (out != NULL)
        PyList_SetSlice(reports, 0, PyList_GET_SIZE(reports), NULL);
    return out;
}

/* calls(name) -> (C face, Python face): how often the entry was called. */
static PyObject *
sim_calls(PyObject *mod, PyObject *which)
{
    const char *name = PyUnicode_AsUTF8(which);
    if (name == NULL)
        return NULL;
    static const char *names[] = {
#define X(id) #id,
#include "entries.h"
#undef X
    };
    for (int i = 0; i < E_COUNT; i++)
        if (strcmp(names[i], name) == 0)
            return Py_BuildValue("(LL)", entry_calls[0][i], entry_calls[1][i]);
    PyErr_Format(PyExc_KeyError, "%s", name);
    return NULL;
}

static PyObject *
sim_set_attribute(PyObject *mod, PyObject *args)
{
    int attr, device, value;
    if (!PyArg_ParseTuple(args, "iii", &attr, &device, &value))
        return NULL;
    if (attr < 0 || attr >= N_ATTR || device < 0 || device >= MAX_DEVICES) {
        PyErr_SetString(PyExc_ValueError, "attribute or device out of range");
        return NULL;
    }
    int before = attributes[device][attr];
    attributes[device][attr] = value;
    return PyLong_FromLong(before);
}

/* pending() -> queued operations not yet run, over every stream. */
static PyObject *
sim_pending(PyObject *mod, PyObject *unused)
{
    unsigned long long n = 0;
    for (int i = 0; i < nstreams; i++)
        n += streams[i]->enqueued - streams[i]->executed;
    return PyLong_FromUnsignedLongLong(n);
}

/* run_all() -> None: the device runs every queued operation (the host learns nothing of it). */
static PyObject *
sim_run_all(PyObject *mod, PyObject *unused)
{
    run_all();
    Py_RETURN_NONE;
}

/* memory_kind(ptr) -> "device", "managed", "pinned", "registered pinned", "freed" or "pageable". */
static PyObject *
sim_memory_kind(PyObject *mod, PyObject *arg)
{
    uintptr_t p = (uintptr_t)PyLong_AsVoidPtr(arg);
    if (PyErr_Occurred())
        return NULL;
    int ai = find_alloc(p);
    if (ai < 0)
        return PyUnicode_FromString("pageable");
    return PyUnicode_FromString(allocs[ai].freed ? "freed" : kind_name[allocs[ai].kind]);
}

/* report(text) -> None: a report of the Python face (a function it does not simulate). */
static PyObject *
sim_report(PyObject *mod, PyObject *text)
{
    const char *t = PyUnicode_AsUTF8(text);
    if (t == NULL)
        return NULL;
    report("%s", t);
    Py_RETURN_NONE;
}

/* pool_release(ptr, size, stream) -> None: CuPy's memory pool took back
 * [ptr, ptr + size), which the next allocation on `stream` (the stream the
 * block was allocated on: CuPy's pool reuses a block on that stream only)
 * may take at once. Reported: queued work of another stream that still
 * reads or writes it and that `stream`'s later work is not ordered after
 * (no event wait, no legacy order, no host wait in between). */
static PyObject *
sim_pool_release(PyObject *mod, PyObject *args)
{
    Py_ssize_t ptr, size, stream;
    if (!PyArg_ParseTuple(args, "nnn", &ptr, &size, &stream))
        return NULL;
    int ai = find_alloc((uintptr_t)ptr);
    if (ai < 0 || allocs[ai].freed || allocs[ai].kind != K_DEVICE)
        Py_RETURN_NONE;
    Alloc *a = &allocs[ai];
    Stream *owner = NULL;
    if (stream == 0 || stream == 1)
        owner = legacy[a->device];
    else if (stream == 2)
        owner = per_thread(a->device);
    else {
        intptr_t off = (intptr_t)stream - STREAM_BASE;
        if (off >= 0 && off % HANDLE_STEP == 0 && off / HANDLE_STEP < nstreams)
            owner = streams[off / HANDLE_STEP];
    }
    if (owner == NULL || owner->destroyed)  /* no later allocation on it: nothing reuses the block */
        Py_RETURN_NONE;
    size_t lo = (uintptr_t)ptr - a->base, hi = lo + (size_t)size;
    for (int i = 0; i < a->nacc; i++) {
        Access *r = &a->acc[i];
        if (r->hi <= lo || r->lo >= hi || r->clock <= vc_get(&host_vc, r->agent) || ordered(r, owner->agent, &owner->vc))
            continue;
        Stream *by = NULL;
        for (int k = 0; k < nstreams; k++)
            if (streams[k]->agent == r->agent)
                by = streams[k];
        if (owner->kind == S_LEGACY && by && by->device == owner->device && blocking(by))
            continue;  /* the legacy stream's next work waits for it */
        char al[200], bn[96], on[96];
        describe_alloc(a, al, sizeof al);
        report("device memory returned to CuPy's memory pool (%zd bytes at +%zu of %s) while %s still %s it (%s): "
               "the pool hands it to the next allocation on %s, whose work is not ordered after that",
               size, lo, al, agent_name(r->agent, bn, sizeof bn), r->write ? "writes" : "reads", r->what,
               stream_name(owner, on, sizeof on));
        break;
    }
    Py_RETURN_NONE;
}

/* capture_status(stream) -> 0 none, 1 active, 2 invalidated (cudaStreamCaptureStatus), without CuPy's raising. */
static PyObject *
sim_capture_status(PyObject *mod, PyObject *arg)
{
    intptr_t h = (intptr_t)PyLong_AsSsize_t(arg);
    if (PyErr_Occurred())
        return NULL;
    Stream *s = resolve_stream(h, "capture_status");
    if (s == NULL)
        return PyErr_Format(PyExc_ValueError, "unknown stream %#lx", (unsigned long)h);
    return PyLong_FromLong(s->cap ? s->cap->status : CS_NONE);
}

static PyMethodDef methods[] = {
    {"capture_status", sim_capture_status, METH_O, NULL},
    {"pool_release", sim_pool_release, METH_VARARGS, NULL},
    {"report", sim_report, METH_O, NULL},
    {"configure", (PyCFunction)(void (*)(void))sim_configure, METH_VARARGS | METH_KEYWORDS, NULL},
    {"entries", sim_entries, METH_NOARGS, NULL},
    {"capi", sim_capi, METH_O, NULL},
    {"forwarding_capi", sim_forwarding_capi, METH_O, NULL},
    {"take_reports", sim_take_reports, METH_NOARGS, NULL},
    {"calls", sim_calls, METH_O, NULL},
    {"set_attribute", sim_set_attribute, METH_VARARGS, NULL},
    {"pending", sim_pending, METH_NOARGS, NULL},
    {"run_all", sim_run_all, METH_NOARGS, NULL},
    {"memory_kind", sim_memory_kind, METH_O, NULL},
    {NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_simcuda", "A simulated CUDA for the tests.", -1, methods};

PyMODINIT_FUNC
PyInit__simcuda(void)
{
    page = sysconf(_SC_PAGESIZE);
    default_attributes();
    reports = PyList_New(0);
    if (reports == NULL)
        return NULL;
    return PyModule_Create(&module_def);
}
