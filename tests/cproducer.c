/* The C half of tests/capsules.py: the deleter and the capsule destructor of
 * the hand-made DLPack capsules, as a C producer writes them.
 *
 * Both run wherever a consumer calls them: on any thread, with or without
 * the GIL, and with an exception pending (NumPy drops a capsule it refused
 * with its error still set). So neither touches Python state: the deleter
 * counts its calls in a table of its own under a mutex, and the destructor
 * only reads the capsule's name and context (which neither raise for a
 * valid capsule) before calling the deleter.
 *
 * Built by tests/capsules.py with the C compiler Python was built with; no
 * Python header is needed (the two capsule functions are declared here).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

extern const char *PyCapsule_GetName(void *capsule);
extern void *PyCapsule_GetContext(void *capsule);

/* The DLTensor fields the deleter poisons, at their dlpack.h offsets. */
#define TENSOR_AT_LEGACY 0
#define TENSOR_AT_VERSIONED 32
#define DELETER_AT_LEGACY 56
#define DELETER_AT_VERSIONED 16
#define POISONED_NDIM (-77)

/* One tensor whose deleter has not run: its struct, the name its capsule
 * was made with, and where its record counts the calls. */
typedef struct Entry {
    uintptr_t address;
    const char *name;
    int64_t *calls;
    int versioned;
    struct Entry *next;
} Entry;

#define BUCKETS 4096
static Entry *table[BUCKETS];
static int64_t n_live;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* Read by the tests: every deleter call, and those on a tensor already
 * freed (or never made here): double frees. */
int64_t total_calls;
int64_t stray_calls;

static inline unsigned
bucket(uintptr_t address)
{
    return (unsigned)((address >> 4) ^ (address >> 16)) % BUCKETS;
}

/* Register a tensor made by capsules.make; 0, or -1 when out of memory. */
int
cproducer_register(uintptr_t address, const char *name, int64_t *calls, int versioned)
{
    Entry *e = malloc(sizeof(Entry));
    if (e == NULL)
        return -1;
    e->address = address;
    e->name = name;
    e->calls = calls;
    e->versioned = versioned;
    pthread_mutex_lock(&lock);
    unsigned b = bucket(address);
    e->next = table[b];
    table[b] = e;
    n_live++;
    pthread_mutex_unlock(&lock);
    return 0;
}

/* Unlink the entry of `address`; the caller holds the lock. */
static Entry *
unlink_entry(uintptr_t address)
{
    Entry **at = &table[bucket(address)];
    for (Entry *e = *at; e != NULL; at = &e->next, e = e->next) {
        if (e->address == address) {
            *at = e->next;
            n_live--;
            return e;
        }
    }
    return NULL;
}

static Entry *
find(uintptr_t address)
{
    for (Entry *e = table[bucket(address)]; e != NULL; e = e->next)
        if (e->address == address)
            return e;
    return NULL;
}

/* 1 while the tensor's deleter has not run. */
int
cproducer_live(uintptr_t address)
{
    pthread_mutex_lock(&lock);
    int live = find(address) != NULL;
    pthread_mutex_unlock(&lock);
    return live;
}

int64_t
cproducer_count(void)
{
    pthread_mutex_lock(&lock);
    int64_t n = n_live;
    pthread_mutex_unlock(&lock);
    return n;
}

/* Forget a tensor without a call (a producer that frees it itself);
 * 1 when it was live. */
int
cproducer_forget(uintptr_t address)
{
    pthread_mutex_lock(&lock);
    Entry *e = unlink_entry(address);
    pthread_mutex_unlock(&lock);
    free(e);
    return e != NULL;
}

static void
poison(uintptr_t address, int versioned)
{
    /* What reuse of freed memory looks like: whoever reads the tensor after
     * its deleter ran finds it malformed (ndim out of range, no shape or
     * strides, no device), never a plausible array. */
    char *t = (char *)address + (versioned ? TENSOR_AT_VERSIONED : TENSOR_AT_LEGACY);
    *(int32_t *)(t + 8) = 0;               /* device_type */
    *(int32_t *)(t + 16) = POISONED_NDIM;  /* ndim */
    *(void **)(t + 24) = NULL;             /* shape */
    *(void **)(t + 32) = NULL;             /* strides */
}

/* The deleter: its struct's memory stays with the Python record, which lets
 * it go only once this call has removed the entry (under the lock), so a
 * later call on the same address only counts a stray call. */
void
cproducer_deleter(void *self)
{
    uintptr_t address = (uintptr_t)self;
    pthread_mutex_lock(&lock);
    __atomic_add_fetch(&total_calls, 1, __ATOMIC_SEQ_CST);
    Entry *e = find(address);
    if (e == NULL) {
        __atomic_add_fetch(&stray_calls, 1, __ATOMIC_SEQ_CST);
    } else {
        __atomic_add_fetch(e->calls, 1, __ATOMIC_SEQ_CST);
        poison(address, e->versioned);
        unlink_entry(address);
    }
    pthread_mutex_unlock(&lock);
    free(e);
}

/* The capsule destructor: like every C producer's, it frees the tensor only
 * while the capsule still has the name it was made with (nobody consumed
 * it). The context is the struct's address. */
void
cproducer_destructor(void *capsule)
{
    uintptr_t address = (uintptr_t)PyCapsule_GetContext(capsule);
    const char *now = PyCapsule_GetName(capsule);
    pthread_mutex_lock(&lock);
    Entry *e = find(address);
    int versioned = e != NULL ? e->versioned : 0;
    int unconsumed = e != NULL && e->name == now;
    pthread_mutex_unlock(&lock);
    if (!unconsumed)
        return;
    void (*deleter)(void *) = *(void (**)(void *))(address + (versioned ? DELETER_AT_VERSIONED : DELETER_AT_LEGACY));
    if (deleter != NULL)
        deleter((void *)address);
    else
        cproducer_forget(address);  /* nothing to call: the producer frees it itself */
}
