// nccl.cpp: the emulator's NCCL (include/nccl.h), a test double for running the GPU
// trainer as several real processes on a CPU. Not NCCL's algorithms: rank 0 accepts one
// TCP connection from every other rank (a star); in every collective each rank sends its
// header (which call, type, op, count, sequence number) and data to rank 0, which checks
// that all ranks called the same collective, reduces in rank order (so the result is
// deterministic and the same on every rank) and sends each rank its result.
// Collectives are asynchronous like NCCL's: the call queues the exchange on its stream
// (emu.cpp) and returns; a thread of the communicator runs it, and the stream's work issued
// after it (and work ordered after that) waits until it is done (cudaStreamQuery says not ready).
// Failures: a peer that closes its socket (it died) or sends nothing for NCCL_EMU_TIMEOUT
// seconds (default 60) puts the communicator into ncclRemoteError; rank 0 then closes
// every connection, so every rank's next call fails instead of waiting.
// Test hook: NCCL_EMU_HANG=K makes this rank stop at its collective number K (counted
// from 0): it sends nothing and never finishes it, but the process lives on (a hung
// peer, not a dead one), until the communicator is aborted.
#include "nccl.h"
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <atomic>
#include <memory>
#include <thread>
#include <vector>
#include "cuda_bf16.h"

// ----------------------------------------------------------------------------
// The unique id: rank 0's address and port, and a random nonce that every rank
// presents when it connects (a stale rank of another job is refused).

#define ID_MAGIC 0x4e43454du  // "NCEM"
struct IdWire {
    uint32_t magic;
    uint32_t ip;     // IPv4, network order
    uint16_t port;   // network order
    uint64_t nonce;
};

struct ncclComm {
    int rank, nranks;
    std::vector<int> fds;          // rank 0: fds[r] is rank r's connection; others: fds[0] is rank 0's
    std::atomic<int> state;        // ncclInProgress during a non-blocking init, then ncclSuccess or the error
    std::atomic<bool> aborting;    // set by ncclCommAbort: loops stop waiting
    std::thread init_thread;       // the non-blocking init
    std::thread running;           // the collective in progress (one at a time: each waits for the previous one)
    uint64_t last_op;              // the stream op of the last collective issued (emu.cpp), 0 before the first
    IdWire id;
    uint64_t seq;                  // collectives issued so far
    char error[256];               // what went wrong, for ncclGetLastError
};

static int listen_fd = -1;  // created by ncclGetUniqueId in the process that will be rank 0
static IdWire listen_id;

static double timeout_s(void) {
    const char *e = getenv("NCCL_EMU_TIMEOUT");
    return e && atof(e) > 0 ? atof(e) : 60.0;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static ncclResult_t comm_fail(ncclComm *c, ncclResult_t r, const char *fmt, ...) {
    if (c->state.load() == ncclSuccess || c->state.load() == ncclInProgress) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->error, sizeof c->error, fmt, ap);
        va_end(ap);
        c->state = r;
    }
    for (int fd : c->fds)  // every peer's next read sees the end of the stream
        if (fd >= 0) shutdown(fd, SHUT_RDWR);
    return r;
}

// Waits until fd is readable (or writable), in slices so that an abort is noticed.
static bool wait_fd(ncclComm *c, int fd, short events, double deadline) {
    while (!c->aborting.load()) {
        struct pollfd p = {fd, events, 0};
        int k = poll(&p, 1, 100);
        if (k > 0) return true;
        if (k < 0 && errno != EINTR) return false;
        if (now_s() > deadline) return false;
    }
    return false;
}

static ncclResult_t recv_all(ncclComm *c, int fd, void *buf, size_t n, int peer) {
    char *p = (char *)buf;
    double limit = timeout_s();
    while (n > 0) {
        if (!wait_fd(c, fd, POLLIN, now_s() + limit))
            return comm_fail(c, ncclRemoteError, "no data from rank %d for %.0f s (NCCL_EMU_TIMEOUT)", peer, limit);
        ssize_t k = recv(fd, p, n, 0);
        if (k == 0) return comm_fail(c, ncclRemoteError, "rank %d closed its connection (it exited or failed)", peer);
        if (k < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            return comm_fail(c, ncclRemoteError, "receiving from rank %d: %s", peer, strerror(errno));
        }
        p += k;
        n -= (size_t)k;
    }
    return ncclSuccess;
}

static ncclResult_t send_all(ncclComm *c, int fd, const void *buf, size_t n, int peer) {
    const char *p = (const char *)buf;
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) { wait_fd(c, fd, POLLOUT, now_s() + timeout_s()); continue; }
            return comm_fail(c, ncclRemoteError, "sending to rank %d: %s", peer, strerror(errno));
        }
        p += k;
        n -= (size_t)k;
    }
    return ncclSuccess;
}

// ----------------------------------------------------------------------------
// Unique id and communicator set-up.

// The address rank 0 is reached at: NCCL_COMM_ID=host:port, else MASTER_ADDR (port
// chosen by the system), else the loopback.
static ncclResult_t id_address(uint32_t *ip, uint16_t *port) {
    char host[256] = "127.0.0.1";
    *port = 0;
    const char *cid = getenv("NCCL_COMM_ID"), *ma = getenv("MASTER_ADDR");
    if (cid && *cid) {
        const char *colon = strrchr(cid, ':');
        if (!colon || colon == cid || (size_t)(colon - cid) >= sizeof host) return ncclInvalidArgument;
        memcpy(host, cid, colon - cid);
        host[colon - cid] = 0;
        *port = (uint16_t)atoi(colon + 1);
    } else if (ma && *ma) {
        snprintf(host, sizeof host, "%s", ma);
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res) return ncclSystemError;
    *ip = ((struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr;
    freeaddrinfo(res);
    return ncclSuccess;
}

static int listen_on(uint16_t port_host, uint16_t *bound) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);  // reachable at whatever address the id names
    a.sin_port = htons(port_host);
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 128) || getsockname(fd, (struct sockaddr *)&a, &len)) {
        close(fd);
        return -1;
    }
    *bound = a.sin_port;
    return fd;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *out) {
    IdWire w;
    uint16_t port;
    if (id_address(&w.ip, &port) != ncclSuccess) return ncclInvalidArgument;
    if (listen_fd >= 0) close(listen_fd);
    listen_fd = listen_on(port, &w.port);
    if (listen_fd < 0) return ncclSystemError;
    w.magic = ID_MAGIC;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&w.nonce, sizeof w.nonce, 1, f) != 1) w.nonce = (uint64_t)getpid() * 1000003u ^ (uint64_t)(now_s() * 1e9);
    if (f) fclose(f);
    listen_id = w;
    memset(out, 0, sizeof *out);
    memcpy(out->internal, &w, sizeof w);
    return ncclSuccess;
}

struct Hello { uint32_t magic; int32_t rank, nranks; uint64_t nonce; };

static ncclResult_t init_root(ncclComm *c) {
    int lfd = listen_fd;
    if (lfd < 0 || listen_id.nonce != c->id.nonce) {  // the id was made elsewhere (NCCL_COMM_ID): listen on its port
        uint16_t bound;
        lfd = listen_on(ntohs(c->id.port), &bound);
        if (lfd < 0) return comm_fail(c, ncclSystemError, "cannot listen on port %d: %s", ntohs(c->id.port), strerror(errno));
    }
    listen_fd = -1;
    double deadline = now_s() + timeout_s();
    for (int k = 1; k < c->nranks; k++) {
        if (!wait_fd(c, lfd, POLLIN, deadline)) {
            close(lfd);
            return comm_fail(c, ncclRemoteError, "only %d of %d ranks connected within %.0f s (NCCL_EMU_TIMEOUT)", k, c->nranks, timeout_s());
        }
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) { k--; continue; }
        Hello h;
        c->fds.push_back(fd);  // so that a failure closes it too
        if (recv_all(c, fd, &h, sizeof h, -1) != ncclSuccess) { close(lfd); return (ncclResult_t)c->state.load(); }
        if (h.magic != ID_MAGIC || h.nonce != c->id.nonce || h.nranks != c->nranks || h.rank < 1 || h.rank >= c->nranks || c->fds[h.rank] >= 0) {
            close(lfd);
            return comm_fail(c, ncclInvalidUsage, "a rank connected with another unique id, world size (%d, here %d) or a duplicate rank (%d)",
                             h.nranks, c->nranks, h.rank);
        }
        c->fds.pop_back();
        c->fds[h.rank] = fd;
    }
    close(lfd);
    for (int r = 1; r < c->nranks; r++) {
        uint32_t ack = ID_MAGIC;
        if (send_all(c, c->fds[r], &ack, sizeof ack, r) != ncclSuccess) return (ncclResult_t)c->state.load();
        int one = 1;
        setsockopt(c->fds[r], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return ncclSuccess;
}

static ncclResult_t init_peer(ncclComm *c) {
    double deadline = now_s() + timeout_s();
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = c->id.ip;
    a.sin_port = c->id.port;
    for (;;) {  // rank 0 may not be listening yet
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return comm_fail(c, ncclSystemError, "socket: %s", strerror(errno));
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
            c->fds[0] = fd;
            break;
        }
        int e = errno;
        close(fd);
        if (c->aborting.load() || now_s() > deadline) {
            char ip[64];
            inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
            return comm_fail(c, ncclRemoteError, "cannot connect to rank 0 at %s:%d: %s", ip, ntohs(a.sin_port), strerror(e));
        }
        usleep(100000);
    }
    int one = 1;
    setsockopt(c->fds[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    Hello h = {ID_MAGIC, c->rank, c->nranks, c->id.nonce};
    uint32_t ack = 0;
    ncclResult_t r = send_all(c, c->fds[0], &h, sizeof h, 0);
    if (r == ncclSuccess) r = recv_all(c, c->fds[0], &ack, sizeof ack, 0);
    if (r == ncclSuccess && ack != ID_MAGIC) r = comm_fail(c, ncclRemoteError, "rank 0 sent a bad acknowledgement");
    return r;
}

static void init_run(ncclComm *c) {
    ncclResult_t r = c->rank == 0 ? init_root(c) : init_peer(c);
    if (r == ncclSuccess) c->state = ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config) {
    *out = NULL;
    if (nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    ncclComm *c = new ncclComm();
    memcpy(&c->id, id.internal, sizeof c->id);
    if (c->id.magic != ID_MAGIC) { delete c; return ncclInvalidArgument; }
    c->rank = rank;
    c->nranks = nranks;
    c->fds.assign(rank == 0 ? nranks : 1, -1);
    c->state = ncclInProgress;
    c->aborting = false;
    c->seq = 0;
    c->last_op = 0;
    c->error[0] = 0;
    *out = c;
    if (config && config->blocking == 0) {
        c->init_thread = std::thread(init_run, c);
        return ncclInProgress;
    }
    init_run(c);
    return (ncclResult_t)c->state.load();
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    return ncclCommInitRankConfig(comm, nranks, id, rank, NULL);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *e) {
    if (!c) return ncclInvalidArgument;
    *e = (ncclResult_t)c->state.load();
    if (*e != ncclInProgress && c->init_thread.joinable()) c->init_thread.join();
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t c, int *n) { *n = c->nranks; return ncclSuccess; }
ncclResult_t ncclCommUserRank(const ncclComm_t c, int *r) { *r = c->rank; return ncclSuccess; }

static ncclResult_t comm_close(ncclComm_t c) {
    if (!c) return ncclSuccess;
    c->aborting = true;
    for (int fd : c->fds)
        if (fd >= 0) shutdown(fd, SHUT_RDWR);
    if (c->init_thread.joinable()) c->init_thread.join();
    emu::device_wait();  // queued collectives of this communicator end at once (aborting), before it is freed
    if (c->running.joinable()) c->running.join();
    for (int fd : c->fds)
        if (fd >= 0) close(fd);
    delete c;
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c) { return comm_close(c); }
ncclResult_t ncclCommDestroy(ncclComm_t c) { return comm_close(c); }

ncclResult_t ncclGetVersion(int *v) { *v = NCCL_VERSION_CODE; return ncclSuccess; }

const char *ncclGetErrorString(ncclResult_t r) {
    static const char *s[] = {"no error", "unhandled cuda error", "unhandled system error", "internal error", "invalid argument",
                              "invalid usage", "remote process exited or there was a network error", "NCCL operation in progress"};
    return (int)r >= 0 && (int)r < ncclNumResults ? s[r] : "unknown result code";
}

const char *ncclGetLastError(ncclComm_t c) { return c ? c->error : ""; }

// ----------------------------------------------------------------------------
// Collectives.

enum Kind { ALLREDUCE = 1, REDUCESCATTER, ALLGATHER, BROADCAST, REDUCE };
static const char *KIND_NAME[] = {"", "AllReduce", "ReduceScatter", "AllGather", "Broadcast", "Reduce"};

struct Header { uint32_t kind, type, op; int32_t root; uint64_t count, seq; };

static size_t type_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
    }
}

template <typename T> static T red(T a, T b, int op) {
    switch (op) {
    case ncclProd: return a * b;
    case ncclMax: return a > b ? a : b;
    case ncclMin: return a < b ? a : b;
    default: return a + b;
    }
}

// acc[i] = acc[i] op x[i]; bf16 through fp32 with one rounding per step
static void reduce_into(void *acc, const void *x, size_t n, ncclDataType_t t, int op) {
    switch (t) {
    case ncclFloat32: for (size_t i = 0; i < n; i++) ((float *)acc)[i] = red(((float *)acc)[i], ((const float *)x)[i], op); break;
    case ncclFloat64: for (size_t i = 0; i < n; i++) ((double *)acc)[i] = red(((double *)acc)[i], ((const double *)x)[i], op); break;
    case ncclInt32: for (size_t i = 0; i < n; i++) ((int32_t *)acc)[i] = red(((int32_t *)acc)[i], ((const int32_t *)x)[i], op); break;
    case ncclInt64: for (size_t i = 0; i < n; i++) ((int64_t *)acc)[i] = red(((int64_t *)acc)[i], ((const int64_t *)x)[i], op); break;
    case ncclBfloat16:
        for (size_t i = 0; i < n; i++) {
            __nv_bfloat16 *a = (__nv_bfloat16 *)acc + i;
            *a = __float2bfloat16(red(__bfloat162float(*a), __bfloat162float(((const __nv_bfloat16 *)x)[i]), op));
        }
        break;
    default: emu::fail("emulated NCCL: reduction of data type %d is not emulated", (int)t);
    }
}

static ncclResult_t usable(ncclComm_t c) {
    if (!c) return ncclInvalidArgument;
    int s = c->state.load();
    return s == ncclInProgress ? ncclInvalidUsage : (ncclResult_t)s;
}

// One collective. in: what this rank contributes (in_n elements); out: its result
// (out_n elements). Rank 0 gathers every contribution in rank order and computes each
// rank's result with finish(all, r, dst). to_root (a Reduce): only the root gets a result
// (of h.count elements; out_n is 0 on the other ranks, which receive nothing).
// Runs on the communicator's thread (submit).
template <typename F>
static ncclResult_t collective(ncclComm_t c, Kind kind, ncclDataType_t t, int op, int root, size_t count, const void *in, size_t in_n,
                               void *out, size_t out_n, F finish, bool to_root = false) {
    ncclResult_t r;
    size_t es = type_size(t);
    Header h = {(uint32_t)kind, (uint32_t)t, (uint32_t)op, root, count, c->seq++};
    const char *hang = getenv("NCCL_EMU_HANG");
    if (hang && *hang && (uint64_t)atoll(hang) == h.seq) {
        fprintf(stderr, "emulated NCCL: rank %d stops answering at collective %llu (%s of %llu, type %u) (NCCL_EMU_HANG)\n", c->rank,
                (unsigned long long)h.seq, KIND_NAME[kind], (unsigned long long)count, (unsigned)t);
        while (!c->aborting.load()) usleep(10000);
        return comm_fail(c, ncclInternalError, "aborted while hung at collective %llu (NCCL_EMU_HANG)", (unsigned long long)h.seq);
    }
    if (c->rank != 0) {
        if ((r = send_all(c, c->fds[0], &h, sizeof h, 0)) != ncclSuccess) return r;
        if (in_n && (r = send_all(c, c->fds[0], in, in_n * es, 0)) != ncclSuccess) return r;
        if (out_n && (r = recv_all(c, c->fds[0], out, out_n * es, 0)) != ncclSuccess) return r;
        return ncclSuccess;
    }
    std::vector<char> all((size_t)c->nranks * in_n * es);  // every rank's contribution, in rank order
    if (in_n) memcpy(all.data(), in, in_n * es);
    for (int p = 1; p < c->nranks; p++) {
        Header hp;
        if ((r = recv_all(c, c->fds[p], &hp, sizeof hp, p)) != ncclSuccess) return r;
        if (memcmp(&hp, &h, sizeof h) != 0)
            return comm_fail(c, ncclInvalidUsage, "collective %llu: rank 0 called %s(count %llu, type %u), rank %d called %s(count %llu, type %u)",
                             (unsigned long long)h.seq, KIND_NAME[h.kind], (unsigned long long)h.count, h.type, p,
                             hp.kind <= REDUCE ? KIND_NAME[hp.kind] : "?", (unsigned long long)hp.count, hp.type);
        if (in_n && (r = recv_all(c, c->fds[p], all.data() + (size_t)p * in_n * es, in_n * es, p)) != ncclSuccess) return r;
    }
    size_t res_n = to_root ? count : out_n;
    std::vector<char> res(res_n * es);
    for (int p = c->nranks - 1; p >= 0; p--) {  // rank 0's own result last: out may alias in
        if (to_root && p != root) continue;
        finish(all.data(), p, res.data());
        if (p == 0) memcpy(out, res.data(), res_n * es);
        else if ((r = send_all(c, c->fds[p], res.data(), res_n * es, p)) != ncclSuccess) return r;
    }
    return ncclSuccess;
}

// Queues a collective (job, run on the communicator's thread) on `stream`, behind the stream's
// work issued before it and the communicator's previous collective; its failure shows in
// ncclCommGetAsyncError. acc: what it reads and writes, for the emulator's cross-stream race check.
static void queue_job(ncclComm_t c, cudaStream_t stream, const char *what, const std::vector<emu::Access> &acc, std::function<void()> job) {
    auto finished = std::make_shared<std::atomic<bool>>(false);
    c->last_op = emu::stream_enqueue(
        stream, what, acc,
        [c, job, finished]() {
            if (c->running.joinable()) c->running.join();  // the previous collective, finished
            c->running = std::thread([c, job, finished]() {
                job();
                finished->store(true);
            });
        },
        [finished]() { return finished->load(); }, c->last_op);
}

// Between ncclGroupStart and the matching ncclGroupEnd, as in NCCL, the collectives are
// only recorded: nothing reaches the stream until the outermost ncclGroupEnd, which queues
// them as one operation (run in the order they were called, the same on every rank, so
// the group's collectives need no concurrency here) reading and writing what they all do.
// A group that is never ended thus never runs, as on a GPU.
static int group_depth = 0;
static ncclComm_t group_comm = NULL;
static cudaStream_t group_stream = 0;
static std::vector<std::function<void()>> group_jobs;
static std::vector<emu::Access> group_acc;

ncclResult_t ncclGroupStart(void) {
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    if (group_depth == 0) return ncclInvalidUsage;
    if (--group_depth > 0 || group_jobs.empty()) return ncclSuccess;
    std::vector<std::function<void()>> jobs;
    std::vector<emu::Access> acc;
    jobs.swap(group_jobs);
    acc.swap(group_acc);
    ncclComm_t c = group_comm;
    group_comm = NULL;
    ncclResult_t r = usable(c);
    if (r != ncclSuccess) return r;
    queue_job(c, group_stream, "an NCCL group", acc, [jobs]() {
        for (const auto &j : jobs) j();
    });
    return ncclSuccess;
}

// A collective: queued on `stream` (inside a group: recorded for ncclGroupEnd). send and
// recv are what it reads and writes.
static ncclResult_t submit(ncclComm_t c, cudaStream_t stream, const char *what, const void *send, size_t send_bytes, void *recv,
                           size_t recv_bytes, std::function<void()> job) {
    ncclResult_t r = usable(c);
    if (r != ncclSuccess) return r;
    std::vector<emu::Access> acc;
    if (send_bytes) acc.push_back({send, send_bytes, false});
    if (recv_bytes) acc.push_back({recv, recv_bytes, true});
    if (group_depth > 0) {
        if (group_comm && group_comm != c) emu::fail("emulated NCCL: a group over two communicators is not emulated");
        if (group_comm && group_stream != stream) emu::fail("emulated NCCL: a group over two streams is not emulated");
        group_comm = c;
        group_stream = stream;
        group_jobs.push_back(job);
        group_acc.insert(group_acc.end(), acc.begin(), acc.end());
        return ncclSuccess;
    }
    queue_job(c, stream, what, acc, job);
    return ncclSuccess;
}

// The element-wise reduction of every rank's n elements starting at element `first` of each contribution.
static void reduce_ranks(void *dst, const char *all, int nranks, size_t in_n, size_t first, size_t n, ncclDataType_t t, int op) {
    size_t es = type_size(t);
    memcpy(dst, all + first * es, n * es);
    for (int p = 1; p < nranks; p++) reduce_into(dst, all + ((size_t)p * in_n + first) * es, n, t, op);
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t s) {
    if (op == ncclAvg) return ncclInvalidArgument;
    return submit(c, s, "ncclAllReduce", send, count * type_size(t), recv, count * type_size(t), [=]() {
        int n = c->nranks;
        std::vector<char> result;
        collective(c, ALLREDUCE, t, op, 0, count, send, count, recv, count, [&](const char *all, int p, char *dst) {
            if (p == n - 1) {  // the same result for every rank: compute it once
                result.resize(count * type_size(t));
                reduce_ranks(result.data(), all, n, count, 0, count, t, op);
            }
            memcpy(dst, result.data(), result.size());
        });
    });
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t s) {
    if (op == ncclAvg) return ncclInvalidArgument;
    if (!c) return ncclInvalidArgument;
    size_t bytes = recvcount * type_size(t);
    return submit(c, s, "ncclReduceScatter", send, bytes * c->nranks, recv, bytes, [=]() {
        int n = c->nranks;
        size_t in_n = (size_t)n * recvcount;
        collective(c, REDUCESCATTER, t, op, 0, recvcount, send, in_n, recv, recvcount,
                   [&](const char *all, int p, char *dst) { reduce_ranks(dst, all, n, in_n, (size_t)p * recvcount, recvcount, t, op); });
    });
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t t, ncclComm_t c, cudaStream_t s) {
    if (!c) return ncclInvalidArgument;
    size_t bytes = sendcount * type_size(t);
    return submit(c, s, "ncclAllGather", send, bytes, recv, bytes * c->nranks, [=]() {
        size_t bytes = (size_t)c->nranks * sendcount * type_size(t);
        collective(c, ALLGATHER, t, 0, 0, sendcount, send, sendcount, recv, (size_t)c->nranks * sendcount,
                   [&](const char *all, int, char *dst) { memcpy(dst, all, bytes); });
    });
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t s) {
    if (!c || root < 0 || root >= c->nranks) return ncclInvalidArgument;
    size_t bytes = count * type_size(t);
    return submit(c, s, "ncclBroadcast", send, c->rank == root ? bytes : 0, recv, bytes, [=]() {
        size_t es = type_size(t);
        // every rank contributes its buffer (only the root's is used): simple, and the sizes match everywhere
        collective(c, BROADCAST, t, 0, root, count, c->rank == root ? send : recv, count, recv, count,
                   [&](const char *all, int, char *dst) { memcpy(dst, all + (size_t)root * count * es, count * es); });
    });
}

// recv (count elements, on the root only) gets the sum over ranks of every rank's send; recv
// may be send (in place). The other ranks' recv is not touched.
ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op, int root, ncclComm_t c, cudaStream_t s) {
    if (!c || root < 0 || root >= c->nranks || op == ncclAvg) return ncclInvalidArgument;
    size_t bytes = count * type_size(t);
    return submit(c, s, "ncclReduce", send, bytes, recv, c->rank == root ? bytes : 0, [=]() {
        int n = c->nranks;
        collective(c, REDUCE, t, op, root, count, send, count, recv, c->rank == root ? count : 0,
                   [&](const char *all, int, char *dst) { reduce_ranks(dst, all, n, count, 0, count, t, op); }, true);
    });
}
