// rendezvous.h: hands a small blob (the NCCL unique id) from rank 0 to every other rank
// of a job that MPI did not launch: over TCP to MASTER_ADDR, or through files in a
// directory that every rank sees (-f DIR, a shared filesystem).
//
// What it is: a one-shot exchange at start-up. Every rank tells rank 0 its rank, the
// world size and the job's fingerprint (a hash of the flags that change training and of
// the data headers, from the caller); rank 0 refuses a rank of another job, with the
// same one-line reason on both sides, waits until every rank has joined, then gives each
// the blob, which it acknowledges. Every wait has a deadline (SFT_RDZV_TIMEOUT seconds,
// default 300): no read, write, connect or file poll waits without one.
// What it is not: authentication or encryption. A stranger's connection (garbage bytes,
// a port scan, a connection that stalls) is dropped without disturbing the job, but
// anyone who can reach the port and knows the protocol and the fingerprint can take a
// rank's place: run jobs on a network you trust.
//
// Both functions return 0, or -1 with a one-line message in err (the caller prints it
// and exits 1). Lines about strangers and refused ranks go to stderr as they happen.
// Plain C and POSIX, valid C++; no other header of this project.
#ifndef SFT_RENDEZVOUS_H
#define SFT_RENDEZVOUS_H

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>

// ---------------------------------------------------------------------------
// The job, the settings from the environment, the messages.

typedef struct {
    int rank, world;            // this process; ranks in the job
    uint64_t fingerprint;       // the job's hash of its training flags and data headers
    double timeout_s;           // deadline for the whole exchange (SFT_RDZV_TIMEOUT, default 300)
    double header_timeout_s;    // TCP: a connection must send its whole header within this (10)
} RdzvJob;

#define RDZV_VERSION 1
#define RDZV_MSG_BYTES 56
#define RDZV_MAX_BLOB 4096
#define RDZV_MAX_PENDING 64     // connections without a header held at once; beyond, the oldest is dropped
#define RDZV_MAX_REPORTS 10     // lines printed about dropped strangers; later ones are only counted
#define RDZV_DEFAULT_PORT 29501 // with neither SFT_RDZV_PORT nor MASTER_PORT: torchrun's 29500, + 1

static const char rdzv_magic[8] = {'S', 'F', 'T', 'R', 'D', 'Z', 'V', 0};

enum { RDZV_HELLO = 1, RDZV_ANSWER = 2, RDZV_ACK = 3 };
enum { RDZV_OK = 0, RDZV_WRONG_VERSION, RDZV_WRONG_FINGERPRINT, RDZV_WRONG_WORLD, RDZV_WRONG_BLOB_SIZE,
       RDZV_BAD_RANK, RDZV_DUPLICATE_RANK };

// One message, RDZV_MSG_BYTES on the wire or in a file: the 8-byte magic, then the
// fields below in this order, little-endian. An ANSWER with status RDZV_OK is followed
// by blob_n bytes of blob.
typedef struct {
    uint32_t version;       // RDZV_VERSION
    uint32_t kind;          // RDZV_HELLO (rank -> 0), RDZV_ANSWER (0 -> rank), RDZV_ACK (rank -> 0)
    uint32_t status;        // ANSWER: RDZV_OK or why the rank is refused
    uint32_t rank;          // HELLO, ACK: the sender; ANSWER: the rank answered
    uint32_t world;         // the sender's world size
    uint32_t blob_n;        // bytes of blob: HELLO, expected; ANSWER, rank 0's
    uint64_t fingerprint;   // the sender's job fingerprint
    uint64_t nonce;         // the joining rank's random number for this run; echoed in ANSWER and ACK
    uint64_t nonce0;        // rank 0's random number for this run (ANSWER, ACK); 0 in HELLO
} RdzvMsg;

static void rdzv_put32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i)); }
static void rdzv_put64(unsigned char *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i)); }
static uint32_t rdzv_get32(const unsigned char *p) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = (v << 8) | p[i]; return v; }
static uint64_t rdzv_get64(const unsigned char *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = (v << 8) | p[i]; return v; }

static void rdzv_encode(const RdzvMsg *m, unsigned char *p) {
    memcpy(p, rdzv_magic, 8);
    rdzv_put32(p + 8, m->version); rdzv_put32(p + 12, m->kind); rdzv_put32(p + 16, m->status);
    rdzv_put32(p + 20, m->rank); rdzv_put32(p + 24, m->world); rdzv_put32(p + 28, m->blob_n);
    rdzv_put64(p + 32, m->fingerprint); rdzv_put64(p + 40, m->nonce); rdzv_put64(p + 48, m->nonce0);
}

// 0 when p holds a message (right magic), -1 for anything else.
static int rdzv_decode(const unsigned char *p, RdzvMsg *m) {
    if (memcmp(p, rdzv_magic, 8) != 0) return -1;
    m->version = rdzv_get32(p + 8); m->kind = rdzv_get32(p + 12); m->status = rdzv_get32(p + 16);
    m->rank = rdzv_get32(p + 20); m->world = rdzv_get32(p + 24); m->blob_n = rdzv_get32(p + 28);
    m->fingerprint = rdzv_get64(p + 32); m->nonce = rdzv_get64(p + 40); m->nonce0 = rdzv_get64(p + 48);
    return 0;
}

static RdzvMsg rdzv_msg(const RdzvJob *job, uint32_t kind, uint32_t rank, size_t blob_n) {
    RdzvMsg m;
    memset(&m, 0, sizeof m);
    m.version = RDZV_VERSION; m.kind = kind; m.rank = rank; m.world = (uint32_t)job->world;
    m.blob_n = (uint32_t)blob_n; m.fingerprint = job->fingerprint;
    return m;
}

// Rank 0's verdict on a HELLO, given the ranks already joined (joined[r] != 0).
static uint32_t rdzv_check_hello(const RdzvJob *job, size_t blob_n, const RdzvMsg *h, const char *joined) {
    if (h->version != RDZV_VERSION) return RDZV_WRONG_VERSION;
    if (h->fingerprint != job->fingerprint) return RDZV_WRONG_FINGERPRINT;
    if (h->world != (uint32_t)job->world) return RDZV_WRONG_WORLD;
    if (h->blob_n != blob_n) return RDZV_WRONG_BLOB_SIZE;
    if (h->rank < 1 || h->rank >= (uint32_t)job->world) return RDZV_BAD_RANK;
    if (joined && joined[h->rank]) return RDZV_DUPLICATE_RANK;
    return RDZV_OK;
}

// Why rank 0 refused a rank: the same text on both sides (h: the rank's HELLO; a: rank
// 0's ANSWER, which carries rank 0's fingerprint, world and blob size).
static void rdzv_refusal_text(char *out, size_t n, const RdzvMsg *h, const RdzvMsg *a) {
    switch (a->status) {
    case RDZV_WRONG_VERSION:
        snprintf(out, n, "rank %u speaks rendezvous protocol %u, rank 0 speaks %u (another build)", h->rank, h->version, a->version); break;
    case RDZV_WRONG_FINGERPRINT:
        snprintf(out, n, "rank %u has job fingerprint %016llx, rank 0 has %016llx: a rank of another job, or started with other flags or data",
                 h->rank, (unsigned long long)h->fingerprint, (unsigned long long)a->fingerprint); break;
    case RDZV_WRONG_WORLD:
        snprintf(out, n, "rank %u has world size %u, rank 0 has %u", h->rank, h->world, a->world); break;
    case RDZV_WRONG_BLOB_SIZE:
        snprintf(out, n, "rank %u expects a %u-byte id, rank 0 has %u bytes (another build)", h->rank, h->blob_n, a->blob_n); break;
    case RDZV_BAD_RANK:
        snprintf(out, n, "rank %u is not a rank that joins rank 0 in a world of %u", h->rank, a->world); break;
    case RDZV_DUPLICATE_RANK:
        snprintf(out, n, "rank %u has already joined (two processes were given rank %u)", h->rank, h->rank); break;
    default:
        snprintf(out, n, "rank %u refused for an unknown reason %u", h->rank, a->status); break;
    }
}

static double rdzv_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// Milliseconds until deadline, for poll(): 0 when past, at most cap_s seconds.
static int rdzv_ms_until(double deadline, double cap_s) {
    double s = deadline - rdzv_now();
    if (s > cap_s) s = cap_s;
    return s <= 0 ? 0 : (int)(s * 1000.0) + 1;
}

static void rdzv_sleep(double s) {
    struct timespec t;
    t.tv_sec = (time_t)s; t.tv_nsec = (long)((s - (double)t.tv_sec) * 1e9);
    nanosleep(&t, NULL);
}

// A random, non-zero number for this run (two runs never share one, so a file or a
// reply from an earlier run is told apart from this run's).
static uint64_t rdzv_nonce(void) {
    uint64_t v = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) { if (read(fd, &v, sizeof v) != (ssize_t)sizeof v) v = 0; close(fd); }
    if (!v) {  // no /dev/urandom: the clock and the process id, mixed
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        v = ((uint64_t)t.tv_sec * 1000000007ull) ^ ((uint64_t)t.tv_nsec << 20) ^ (uint64_t)getpid();
        v ^= v >> 33; v *= 0xff51afd7ed558ccdull; v ^= v >> 33;
    }
    return v ? v : 1;
}

// The job's timeouts from the environment: SFT_RDZV_TIMEOUT (seconds, > 0) else 300;
// the per-connection header timeout 10 s (or the overall one when shorter).
static int rdzv_job_init(RdzvJob *job, int rank, int world, uint64_t fingerprint, char *err, size_t err_n) {
    job->rank = rank; job->world = world; job->fingerprint = fingerprint;
    job->timeout_s = 300; job->header_timeout_s = 10;
    const char *t = getenv("SFT_RDZV_TIMEOUT");
    if (t && *t) {
        char *end;
        double v = strtod(t, &end);
        if (*end || !(v > 0 && v < 1e7)) { snprintf(err, err_n, "SFT_RDZV_TIMEOUT must be a number of seconds > 0, got '%s'", t); return -1; }
        job->timeout_s = v;
    }
    if (job->header_timeout_s > job->timeout_s) job->header_timeout_s = job->timeout_s;
    return 0;
}

// The TCP port: SFT_RDZV_PORT if set, else MASTER_PORT + 1 (torchrun's own agent
// listens on MASTER_PORT on node 0), else RDZV_DEFAULT_PORT. -1 and a message on a bad value.
static int rdzv_port_from_env(char *err, size_t err_n) {
    const char *names[2] = {"SFT_RDZV_PORT", "MASTER_PORT"};
    for (int i = 0; i < 2; i++) {
        const char *s = getenv(names[i]);
        if (!s || !*s) continue;
        char *end;
        long v = strtol(s, &end, 10);
        long port = v + i;  // MASTER_PORT + 1
        if (*end || v < 1 || port > 65535) {
            snprintf(err, err_n, "%s must be a TCP port%s, got '%s'", names[i], i ? " below 65535 (the rendezvous uses MASTER_PORT + 1)" : " (1-65535)", s);
            return -1;
        }
        return (int)port;
    }
    return RDZV_DEFAULT_PORT;
}

// ---------------------------------------------------------------------------
// Sockets: non-blocking, every wait through poll() with a deadline.

static void rdzv_peer_name(const struct sockaddr_storage *sa, char *out, size_t n) {
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (getnameinfo((const struct sockaddr *)sa, sizeof *sa, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        snprintf(out, n, "an unknown address");
    else snprintf(out, n, strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, serv);
}

static int rdzv_set_nonblocking(int fd) {
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

// Sends all n bytes before the deadline: 0, or -1 (errno ETIMEDOUT or the socket's error).
static int rdzv_send_all(int fd, const unsigned char *p, size_t n, double deadline) {
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k > 0) { p += k; n -= (size_t)k; continue; }
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
        struct pollfd pf = {fd, POLLOUT, 0};
        int ms = rdzv_ms_until(deadline, 1e6);
        if (ms == 0) { errno = ETIMEDOUT; return -1; }
        if (poll(&pf, 1, ms) < 0 && errno != EINTR) return -1;
    }
    return 0;
}

// Receives n bytes before the deadline: the count received (less than n when the peer
// closed first), or -1 (errno ETIMEDOUT or the socket's error).
static long rdzv_recv_all(int fd, unsigned char *p, size_t n, double deadline) {
    size_t got = 0;
    while (got < n) {
        ssize_t k = recv(fd, p + got, n - got, 0);
        if (k > 0) { got += (size_t)k; continue; }
        if (k == 0) break;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
        struct pollfd pf = {fd, POLLIN, 0};
        int ms = rdzv_ms_until(deadline, 1e6);
        if (ms == 0) { errno = ETIMEDOUT; return -1; }
        if (poll(&pf, 1, ms) < 0 && errno != EINTR) return -1;
    }
    return (long)got;
}

// ---------------------------------------------------------------------------
// TCP, rank 0: listen, take HELLOs, answer every rank once all have joined, take ACKs.

enum { RDZV_C_FREE, RDZV_C_HEADER, RDZV_C_JOINED, RDZV_C_SENDING, RDZV_C_ACK, RDZV_C_DONE };

typedef struct {
    int fd;                              // the connection; -1 when the slot is free
    int state;                           // RDZV_C_*: what is awaited from or sent to the peer
    double since;                        // when it was accepted (HEADER: dropped at since + header timeout)
    unsigned char in[RDZV_MSG_BYTES];    // the message being received (HELLO, then ACK)
    size_t in_n;                         // bytes of it received
    unsigned char *out;                  // SENDING: the ANSWER and blob, out_n bytes, out_sent sent
    size_t out_n, out_sent;
    RdzvMsg hello;                       // JOINED and later: the rank's HELLO
    char peer[80];                       // "address:port", for messages
} RdzvConn;

typedef struct {
    const RdzvJob *job;
    RdzvConn *conns;                     // world - 1 ranks + RDZV_MAX_PENDING strangers at most
    int nconns;
    char *joined;                        // [world]: 1 when that rank's connection is joined (or later)
    int njoined, nacked;
    int reports, unreported;             // stranger lines printed; strangers dropped silently after that
} RdzvServer;

static void rdzv_close_conn(RdzvServer *s, RdzvConn *c) {
    if (c->state >= RDZV_C_JOINED && c->state != RDZV_C_DONE) { s->joined[c->hello.rank] = 0; s->njoined--; }
    if (c->fd >= 0) close(c->fd);
    free(c->out);
    c->out = NULL; c->fd = -1; c->state = RDZV_C_FREE; c->in_n = 0;
}

// A stranger's connection: one line at most each, RDZV_MAX_REPORTS lines in all.
static void rdzv_drop_stranger(RdzvServer *s, RdzvConn *c, const char *why) {
    if (s->reports < RDZV_MAX_REPORTS) {
        fprintf(stderr, "rendezvous: ignored a connection from %s: %s%s\n", c->peer, why,
                ++s->reports == RDZV_MAX_REPORTS ? " (further ones are not reported)" : "");
    } else s->unreported++;
    rdzv_close_conn(s, c);
}

static void rdzv_take_hello(RdzvServer *s, RdzvConn *c, size_t blob_n) {
    RdzvMsg h;
    if (rdzv_decode(c->in, &h) != 0 || h.kind != RDZV_HELLO) { rdzv_drop_stranger(s, c, "not a rendezvous header"); return; }
    uint32_t status = rdzv_check_hello(s->job, blob_n, &h, s->joined);
    if (status != RDZV_OK) {
        RdzvMsg a = rdzv_msg(s->job, RDZV_ANSWER, h.rank, blob_n);
        a.status = status; a.nonce = h.nonce;
        unsigned char buf[RDZV_MSG_BYTES];
        rdzv_encode(&a, buf);
        send(c->fd, buf, sizeof buf, MSG_NOSIGNAL | MSG_DONTWAIT);  // best effort: a 56-byte reply fits any socket buffer
        char why[300];
        rdzv_refusal_text(why, sizeof why, &h, &a);
        fprintf(stderr, "rendezvous: refused %s: %s; still waiting for this job's ranks\n", c->peer, why);
        rdzv_close_conn(s, c);
        return;
    }
    c->hello = h; c->state = RDZV_C_JOINED; c->in_n = 0;
    s->joined[h.rank] = 1; s->njoined++;
}

// Reads what the peer sent; returns 0 when the connection goes on, -1 when it was closed here.
static int rdzv_serve_readable(RdzvServer *s, RdzvConn *c, size_t blob_n, char *err, size_t err_n, int *failed) {
    if (c->state == RDZV_C_JOINED || c->state == RDZV_C_SENDING) {
        // a joined rank sends nothing until it has the blob: only its leaving is expected
        unsigned char b;
        ssize_t k = recv(c->fd, &b, 1, 0);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
        if (c->state == RDZV_C_SENDING) {
            snprintf(err, err_n, "rendezvous: rank %u (%s) left before it received the id", c->hello.rank, c->peer);
            *failed = 1; return -1;
        }
        fprintf(stderr, "rendezvous: rank %u (%s) %s before the exchange; waiting for it to join again\n", c->hello.rank, c->peer,
                k == 0 ? "disconnected" : "broke the protocol");
        rdzv_close_conn(s, c);
        return -1;
    }
    ssize_t k = recv(c->fd, c->in + c->in_n, RDZV_MSG_BYTES - c->in_n, 0);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
    if (k <= 0) {
        if (c->state == RDZV_C_ACK) {
            snprintf(err, err_n, "rendezvous: rank %u (%s) disconnected before acknowledging the id", c->hello.rank, c->peer);
            *failed = 1; return -1;
        }
        rdzv_drop_stranger(s, c, c->in_n ? "closed in the middle of a header" : "closed without sending anything");
        return -1;
    }
    c->in_n += (size_t)k;
    if (c->in_n < RDZV_MSG_BYTES) return 0;
    if (c->state == RDZV_C_HEADER) { rdzv_take_hello(s, c, blob_n); return c->fd < 0 ? -1 : 0; }
    RdzvMsg m;  // RDZV_C_ACK
    if (rdzv_decode(c->in, &m) != 0 || m.kind != RDZV_ACK) {
        snprintf(err, err_n, "rendezvous: rank %u (%s) answered the id with something that is not its acknowledgement", c->hello.rank, c->peer);
        *failed = 1; return -1;
    }
    c->state = RDZV_C_DONE; s->nacked++;
    close(c->fd); c->fd = -1;
    return -1;
}

static void rdzv_accept_all(RdzvServer *s, int lfd) {
    for (;;) {
        struct sockaddr_storage sa;
        socklen_t sl = sizeof sa;
        int fd = accept(lfd, (struct sockaddr *)&sa, &sl);
        if (fd < 0) return;  // EAGAIN: none left (other errors: a connection that vanished; poll again)
        fcntl(fd, F_SETFD, FD_CLOEXEC);
        rdzv_set_nonblocking(fd);
        int pending = 0, oldest = -1, free_slot = -1;
        for (int i = 0; i < s->nconns; i++) {
            RdzvConn *c = &s->conns[i];
            if (c->state == RDZV_C_FREE && free_slot < 0) free_slot = i;
            if (c->state == RDZV_C_HEADER) { pending++; if (oldest < 0 || c->since < s->conns[oldest].since) oldest = i; }
        }
        if (pending >= RDZV_MAX_PENDING) {  // a flood: the longest-waiting header is the likeliest stall
            rdzv_drop_stranger(s, &s->conns[oldest], "dropped for a newer connection (too many without a header)");
            free_slot = oldest;
        }
        RdzvConn *c = &s->conns[free_slot];
        memset(c, 0, sizeof *c);
        c->fd = fd; c->state = RDZV_C_HEADER; c->since = rdzv_now();
        rdzv_peer_name(&sa, c->peer, sizeof c->peer);
    }
}

static void rdzv_missing_ranks(const RdzvServer *s, char *out, size_t n, int acked) {
    size_t k = 0;
    out[0] = 0;
    int count = 0;
    for (int r = 1; r < s->job->world; r++) {
        int have = s->joined[r];
        if (acked) {  // joined ranks that have not acknowledged
            have = 1;
            for (int i = 0; i < s->nconns; i++)
                if (s->conns[i].state == RDZV_C_ACK || s->conns[i].state == RDZV_C_SENDING)
                    if ((int)s->conns[i].hello.rank == r) have = 0;
        }
        if (have) continue;
        if (++count <= 16 && k + 16 < n) k += (size_t)snprintf(out + k, n - k, "%s%d", count > 1 ? ", " : "", r);
    }
    if (count > 16 && k + 16 < n) snprintf(out + k, n - k, " and %d more", count - 16);
}

static int rdzv_tcp_serve(const RdzvJob *job, int lfd, const char *where, const void *blob, size_t blob_n, char *err, size_t err_n) {
    RdzvServer s;
    memset(&s, 0, sizeof s);
    s.job = job;
    s.nconns = job->world - 1 + RDZV_MAX_PENDING;
    s.conns = (RdzvConn *)calloc((size_t)s.nconns, sizeof *s.conns);
    s.joined = (char *)calloc((size_t)job->world, 1);
    struct pollfd *pf = (struct pollfd *)calloc((size_t)s.nconns + 1, sizeof *pf);
    int *which = (int *)calloc((size_t)s.nconns + 1, sizeof *which);
    if (!s.conns || !s.joined || !pf || !which) { snprintf(err, err_n, "rendezvous: out of memory"); return -1; }
    for (int i = 0; i < s.nconns; i++) s.conns[i].fd = -1;
    // rank 0 holds a connection per rank at once: raise the open-file limit to fit, up to
    // the hard limit (else the ranks beyond it could never join)
    struct rlimit rl;
    rlim_t need = (rlim_t)s.nconns + 64;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
            snprintf(err, err_n, "rendezvous: rank 0 needs %llu open files for %d ranks, the limit is %llu (raise it: ulimit -n)",
                     (unsigned long long)need, job->world, (unsigned long long)rl.rlim_max);
            free(s.conns); free(s.joined); free(pf); free(which);
            return -1;
        }
        rl.rlim_cur = need;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    uint64_t nonce0 = rdzv_nonce();
    double deadline = rdzv_now() + job->timeout_s;
    int answering = 0, failed = 0;
    while (!failed && s.nacked < job->world - 1) {
        if (!answering && s.njoined == job->world - 1) {  // everyone is here: answer them all
            answering = 1;
            for (int i = 0; i < s.nconns; i++) {
                RdzvConn *c = &s.conns[i];
                if (c->state != RDZV_C_JOINED) continue;
                RdzvMsg a = rdzv_msg(job, RDZV_ANSWER, c->hello.rank, blob_n);
                a.nonce = c->hello.nonce; a.nonce0 = nonce0;
                c->out_n = RDZV_MSG_BYTES + blob_n; c->out_sent = 0;
                c->out = (unsigned char *)malloc(c->out_n);
                if (!c->out) { snprintf(err, err_n, "rendezvous: out of memory"); failed = 1; break; }
                rdzv_encode(&a, c->out);
                memcpy(c->out + RDZV_MSG_BYTES, blob, blob_n);
                c->state = RDZV_C_SENDING;
            }
            if (failed) break;
        }
        double now = rdzv_now();
        if (now >= deadline) {
            char missing[200];
            rdzv_missing_ranks(&s, missing, sizeof missing, answering);
            const char *plural = strchr(missing, ',') ? "s" : "";
            if (answering) snprintf(err, err_n, "rendezvous at %s timed out after %g s: no acknowledgement of the id from rank%s %s (of %d)",
                                    where, job->timeout_s, plural, missing, job->world);
            else snprintf(err, err_n, "rendezvous at %s timed out after %g s: rank%s %s (of %d) never joined (were they started, with this MASTER_ADDR and port?)",
                          where, job->timeout_s, plural, missing, job->world);
            failed = 1; break;
        }
        // wait: for the listening socket, every connection, and the next header timeout
        double wake = deadline;
        int np = 0;
        pf[np].fd = lfd; pf[np].events = POLLIN; which[np++] = -1;
        for (int i = 0; i < s.nconns; i++) {
            RdzvConn *c = &s.conns[i];
            if (c->fd < 0) continue;
            if (c->state == RDZV_C_HEADER && c->since + job->header_timeout_s < wake) wake = c->since + job->header_timeout_s;
            pf[np].fd = c->fd; pf[np].events = (short)(POLLIN | (c->state == RDZV_C_SENDING ? POLLOUT : 0)); which[np++] = i;
        }
        if (poll(pf, (nfds_t)np, rdzv_ms_until(wake, 1e6)) < 0 && errno != EINTR) {
            snprintf(err, err_n, "rendezvous at %s: poll failed: %s", where, strerror(errno));
            failed = 1; break;
        }
        for (int p = 1; p < np && !failed; p++) {
            RdzvConn *c = &s.conns[which[p]];
            if (c->fd != pf[p].fd) continue;  // closed meanwhile
            if ((pf[p].revents & (POLLIN | POLLHUP | POLLERR)) && rdzv_serve_readable(&s, c, blob_n, err, err_n, &failed) < 0) continue;
            if (c->state == RDZV_C_SENDING && (pf[p].revents & POLLOUT)) {
                ssize_t k = send(c->fd, c->out + c->out_sent, c->out_n - c->out_sent, MSG_NOSIGNAL);
                if (k > 0) c->out_sent += (size_t)k;
                else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                    snprintf(err, err_n, "rendezvous: sending the id to rank %u (%s) failed: %s", c->hello.rank, c->peer, strerror(errno));
                    failed = 1; break;
                }
                if (c->out_sent == c->out_n) { c->state = RDZV_C_ACK; c->in_n = 0; }
            }
        }
        now = rdzv_now();
        for (int i = 0; i < s.nconns; i++)
            if (s.conns[i].state == RDZV_C_HEADER && now >= s.conns[i].since + job->header_timeout_s)
                rdzv_drop_stranger(&s, &s.conns[i], "sent no complete header in time");
        if (!failed && (pf[0].revents & POLLIN)) rdzv_accept_all(&s, lfd);
    }
    if (s.unreported) fprintf(stderr, "rendezvous: %d more connections from strangers ignored\n", s.unreported);
    for (int i = 0; i < s.nconns; i++) { if (s.conns[i].fd >= 0) close(s.conns[i].fd); free(s.conns[i].out); }
    free(s.conns); free(s.joined); free(pf); free(which);
    return failed ? -1 : 0;
}

// ---------------------------------------------------------------------------
// TCP, a joining rank: connect (retrying until rank 0 listens), HELLO, ANSWER, ACK.

static int rdzv_tcp_join(const RdzvJob *job, const char *host, int port, const char *where, void *blob, size_t blob_n, char *err, size_t err_n) {
    double deadline = rdzv_now() + job->timeout_s;
    char port_s[16], problem[200] = "nothing tried";
    snprintf(port_s, sizeof port_s, "%d", port);
    RdzvMsg h = rdzv_msg(job, RDZV_HELLO, (uint32_t)job->rank, blob_n);
    h.nonce = rdzv_nonce();
    unsigned char hello[RDZV_MSG_BYTES], in[RDZV_MSG_BYTES];
    rdzv_encode(&h, hello);
    for (;;) {
        if (rdzv_now() >= deadline) {
            snprintf(err, err_n, "rendezvous: rank %d timed out after %g s joining rank 0 at %s: %s", job->rank, job->timeout_s, where, problem);
            return -1;
        }
        struct addrinfo hints, *res = NULL;
        memset(&hints, 0, sizeof hints);
        hints.ai_socktype = SOCK_STREAM;
        int g = getaddrinfo(host, port_s, &hints, &res);
        if (g != 0) { snprintf(problem, sizeof problem, "cannot resolve MASTER_ADDR: %s", gai_strerror(g)); rdzv_sleep(0.5); continue; }
        int fd = -1;
        for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
            fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
            if (fd < 0) { snprintf(problem, sizeof problem, "socket: %s", strerror(errno)); continue; }
            int e = 0;
            if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
                e = errno;
                if (e == EINPROGRESS) {
                    struct pollfd pf = {fd, POLLOUT, 0};
                    e = poll(&pf, 1, rdzv_ms_until(deadline, 5)) == 1 ? 0 : ETIMEDOUT;
                    socklen_t l = sizeof e;
                    if (!e) getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l);
                }
            }
            if (e) { snprintf(problem, sizeof problem, "connect: %s", strerror(e)); close(fd); fd = -1; }
        }
        freeaddrinfo(res);
        if (fd < 0) { rdzv_sleep(0.2); continue; }  // rank 0 may not listen yet
        long got = -1;
        if (rdzv_send_all(fd, hello, sizeof hello, deadline) == 0) got = rdzv_recv_all(fd, in, sizeof in, deadline);
        if (got != (long)sizeof in) {
            int e = errno;
            close(fd);
            if (got < 0 && e == ETIMEDOUT) snprintf(problem, sizeof problem, "connected, but rank 0 did not answer (it waits until every rank has joined)");
            else if (got <= 0) { snprintf(problem, sizeof problem, "the connection was closed or failed before an answer"); rdzv_sleep(0.2); }
            else { snprintf(err, err_n, "rendezvous: %s sent %ld bytes and closed: not this job's rank 0 (another service on this port?)", where, got); return -1; }
            continue;
        }
        RdzvMsg a;
        if (rdzv_decode(in, &a) != 0 || a.kind != RDZV_ANSWER || a.rank != h.rank || a.nonce != h.nonce) {
            close(fd);
            snprintf(err, err_n, "rendezvous: %s answered with bytes that are not a rendezvous answer to this rank: not this job's rank 0 (another service on this port?)", where);
            return -1;
        }
        if (a.status != RDZV_OK || a.blob_n != blob_n) {
            if (a.status == RDZV_OK) a.status = RDZV_WRONG_BLOB_SIZE;
            close(fd);
            char why[300];
            rdzv_refusal_text(why, sizeof why, &h, &a);
            snprintf(err, err_n, "rendezvous: rank 0 at %s refused this rank: %s", where, why);
            return -1;
        }
        got = rdzv_recv_all(fd, (unsigned char *)blob, blob_n, deadline);
        RdzvMsg k = rdzv_msg(job, RDZV_ACK, h.rank, blob_n);
        k.nonce = h.nonce; k.nonce0 = a.nonce0;
        rdzv_encode(&k, in);
        int ok = got == (long)blob_n && rdzv_send_all(fd, in, sizeof in, deadline) == 0;
        close(fd);
        if (!ok) { snprintf(err, err_n, "rendezvous: the connection to rank 0 at %s broke while receiving the id", where); return -1; }
        return 0;
    }
}

// Rank 0 listens on host:port (host's own address, or every address of its family when
// host is not one of this machine's), the others join it. blob: rank 0's input,
// everyone else's output, blob_n bytes (at most RDZV_MAX_BLOB).
static int rdzv_tcp_exchange(const RdzvJob *job, const char *host, int port, void *blob, size_t blob_n, char *err, size_t err_n) {
    char where[300];
    snprintf(where, sizeof where, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
    if (blob_n > RDZV_MAX_BLOB) { snprintf(err, err_n, "rendezvous: a %zu-byte id is too long", blob_n); return -1; }
    if (job->world <= 1) return 0;
    if (job->rank != 0) return rdzv_tcp_join(job, host, port, where, blob, blob_n, err, err_n);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", port);
    int g = getaddrinfo(host, port_s, &hints, &res);
    if (g != 0) { snprintf(err, err_n, "rendezvous: cannot resolve MASTER_ADDR '%s': %s", host, gai_strerror(g)); return -1; }
    int fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, res->ai_protocol);
    int one = 1, e = 0;
    if (fd < 0) e = errno;
    else {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, res->ai_addr, res->ai_addrlen) != 0) {
            e = errno;
            if (e == EADDRNOTAVAIL) {  // MASTER_ADDR is not this machine's own address (NAT, a load balancer): listen on all
                struct sockaddr_storage any;
                memset(&any, 0, sizeof any);
                any.ss_family = (sa_family_t)res->ai_family;
                if (res->ai_family == AF_INET) ((struct sockaddr_in *)&any)->sin_port = htons((uint16_t)port);
                else ((struct sockaddr_in6 *)&any)->sin6_port = htons((uint16_t)port);
                e = bind(fd, (struct sockaddr *)&any, res->ai_addrlen) != 0 ? errno : 0;
            }
        }
        if (!e && listen(fd, 128) != 0) e = errno;
    }
    freeaddrinfo(res);
    if (e) {
        if (fd >= 0) close(fd);
        snprintf(err, err_n, "rendezvous: rank 0 cannot listen on %s: %s%s", where, strerror(e),
                 e == EADDRINUSE ? " (another job's rendezvous? set SFT_RDZV_PORT, or MASTER_PORT: the port used is MASTER_PORT + 1)" : "");
        return -1;
    }
    int rc = rdzv_tcp_serve(job, fd, where, blob, blob_n, err, err_n);
    close(fd);
    return rc;
}

// ---------------------------------------------------------------------------
// Files in a shared directory (-f DIR).
//
// Rank r writes DIR/rdzv-hello-<r> (its HELLO with a fresh nonce); rank 0 answers with
// DIR/rdzv-answer-<r> (the ANSWER echoing that nonce, with rank 0's own fresh nonce0 and
// the blob); rank r takes only an answer echoing its nonce and writes DIR/rdzv-ack-<r>
// echoing both; rank 0 is done with r when an ack echoes its own nonce0. Every file is written to a temporary name and renamed, so a reader sees a
// whole file or none. Files left by an earlier run (a crash, another fingerprint, the
// same one) are harmless: their nonces are not this run's, so an old answer is never
// taken as the blob and an old ack never makes rank 0 believe a rank has the blob; a new
// HELLO simply replaces an old one of the same rank, and rank 0 answers each new nonce
// once. When all are done rank 0 removes the files. One job at a time per directory.

static int rdzv_write_file(const char *dir, const char *name, int rank, const unsigned char *data, size_t n) {
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/%s-%d", dir, name, rank);
    snprintf(tmp, sizeof tmp, "%s/.%s-%d.%d.%016llx.tmp", dir, name, rank, (int)getpid(), (unsigned long long)rdzv_nonce());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    int ok = write(fd, data, n) == (ssize_t)n;
    if (close(fd) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) { int e = errno; unlink(tmp); errno = e; return -1; }
    return 0;
}

// Reads DIR/name-rank into m (and up to blob_n bytes after it into blob): the bytes
// after the message, or -1 when the file is absent or is not a message.
static long rdzv_read_file(const char *dir, const char *name, int rank, RdzvMsg *m, void *blob, size_t blob_n) {
    char path[4200];
    unsigned char buf[RDZV_MSG_BYTES + RDZV_MAX_BLOB + 1];
    snprintf(path, sizeof path, "%s/%s-%d", dir, name, rank);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    if (n < RDZV_MSG_BYTES || rdzv_decode(buf, m) != 0) return -1;
    size_t extra = (size_t)n - RDZV_MSG_BYTES;
    if (blob) memcpy(blob, buf + RDZV_MSG_BYTES, extra < blob_n ? extra : blob_n);
    return (long)extra;
}

static void rdzv_remove_file(const char *dir, const char *name, int rank) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s-%d", dir, name, rank);
    unlink(path);
}

static int rdzv_file_join(const RdzvJob *job, const char *dir, void *blob, size_t blob_n, char *err, size_t err_n) {
    double deadline = rdzv_now() + job->timeout_s;
    RdzvMsg h = rdzv_msg(job, RDZV_HELLO, (uint32_t)job->rank, blob_n);
    h.nonce = rdzv_nonce();
    unsigned char buf[RDZV_MSG_BYTES];
    rdzv_encode(&h, buf);
    if (rdzv_write_file(dir, "rdzv-hello", job->rank, buf, sizeof buf) != 0) {
        snprintf(err, err_n, "rendezvous: %s: cannot write this rank's file: %s", dir, strerror(errno));
        return -1;
    }
    for (;;) {
        RdzvMsg a;
        long extra = rdzv_read_file(dir, "rdzv-answer", job->rank, &a, blob, blob_n);
        if (extra >= 0 && a.kind == RDZV_ANSWER && a.rank == h.rank && a.nonce == h.nonce) {  // an answer to this run
            if (a.status == RDZV_OK && (a.blob_n != blob_n || extra != (long)blob_n)) a.status = RDZV_WRONG_BLOB_SIZE;
            if (a.status != RDZV_OK) {
                char why[300];
                rdzv_refusal_text(why, sizeof why, &h, &a);
                snprintf(err, err_n, "rendezvous: rank 0 refused this rank in %s: %s", dir, why);
                return -1;
            }
            RdzvMsg k = rdzv_msg(job, RDZV_ACK, h.rank, blob_n);
            k.nonce = h.nonce; k.nonce0 = a.nonce0;
            rdzv_encode(&k, buf);
            if (rdzv_write_file(dir, "rdzv-ack", job->rank, buf, sizeof buf) != 0) {
                snprintf(err, err_n, "rendezvous: %s: cannot write this rank's acknowledgement: %s", dir, strerror(errno));
                return -1;
            }
            return 0;
        }
        if (rdzv_now() >= deadline) {
            snprintf(err, err_n, "rendezvous: rank %d timed out after %g s waiting for rank 0's answer in %s (is rank 0 running, with the same -f directory?)",
                     job->rank, job->timeout_s, dir);
            return -1;
        }
        rdzv_sleep(0.05);
    }
}

static int rdzv_file_serve(const RdzvJob *job, const char *dir, const void *blob, size_t blob_n, char *err, size_t err_n) {
    int W = job->world, ndone = 0, rc = 0;
    uint64_t nonce0 = rdzv_nonce();
    uint64_t *answered = (uint64_t *)calloc((size_t)W, sizeof *answered);  // [W]: the HELLO nonce rank 0 last answered, 0 = none
    char *ok = (char *)calloc((size_t)W, 1), *done = (char *)calloc((size_t)W, 1);  // [W]: answered with the blob; acknowledged
    unsigned char *out = (unsigned char *)malloc(RDZV_MSG_BYTES + blob_n);
    if (!answered || !ok || !done || !out) { snprintf(err, err_n, "rendezvous: out of memory"); rc = -1; }
    double deadline = rdzv_now() + job->timeout_s;
    while (rc == 0 && ndone < W - 1) {
        for (int r = 1; r < W && rc == 0; r++) {
            if (done[r]) continue;
            RdzvMsg h, k;
            if (rdzv_read_file(dir, "rdzv-hello", r, &h, NULL, 0) >= 0 && h.kind == RDZV_HELLO && h.nonce != answered[r]) {
                RdzvMsg a = rdzv_msg(job, RDZV_ANSWER, (uint32_t)r, blob_n);
                a.status = h.rank == (uint32_t)r ? rdzv_check_hello(job, blob_n, &h, NULL) : (uint32_t)RDZV_BAD_RANK;
                a.nonce = h.nonce; a.nonce0 = nonce0;
                rdzv_encode(&a, out);
                if (a.status == RDZV_OK) memcpy(out + RDZV_MSG_BYTES, blob, blob_n);
                if (rdzv_write_file(dir, "rdzv-answer", r, out, RDZV_MSG_BYTES + (a.status == RDZV_OK ? blob_n : 0)) != 0) {
                    snprintf(err, err_n, "rendezvous: %s: cannot write the answer to rank %d: %s", dir, r, strerror(errno));
                    rc = -1; break;
                }
                if (a.status != RDZV_OK) {
                    char why[300];
                    rdzv_refusal_text(why, sizeof why, &h, &a);
                    fprintf(stderr, "rendezvous: refused the registration of rank %d in %s (a leftover of an earlier run, or a rank of another job): %s; still waiting\n", r, dir, why);
                }
                answered[r] = h.nonce; ok[r] = a.status == RDZV_OK;
            }
            if (rdzv_read_file(dir, "rdzv-ack", r, &k, NULL, 0) >= 0 && k.kind == RDZV_ACK && k.nonce0 == nonce0) { done[r] = 1; ndone++; }
        }
        if (rc != 0 || ndone == W - 1) break;
        if (rdzv_now() >= deadline) {
            char missing[200];
            size_t n = 0;
            int count = 0;
            missing[0] = 0;
            for (int r = 1; r < W; r++)
                if (!done[r] && ++count <= 16) n += (size_t)snprintf(missing + n, sizeof missing - n, "%s%d%s", count > 1 ? ", " : "", r, ok[r] ? " (answered, no acknowledgement)" : "");
            if (count > 16) snprintf(missing + n, sizeof missing - n, " and %d more", count - 16);
            snprintf(err, err_n, "rendezvous in %s timed out after %g s: still missing rank%s %s (of %d); were they started with this -f directory?",
                     dir, job->timeout_s, count > 1 ? "s" : "", missing, W);
            rc = -1; break;
        }
        rdzv_sleep(0.05);
    }
    if (rc == 0)
        for (int r = 1; r < W; r++) { rdzv_remove_file(dir, "rdzv-hello", r); rdzv_remove_file(dir, "rdzv-answer", r); rdzv_remove_file(dir, "rdzv-ack", r); }
    free(answered); free(ok); free(done); free(out);
    return rc;
}

// Rank 0 answers through files in dir, the others register there. blob as for TCP.
static int rdzv_file_exchange(const RdzvJob *job, const char *dir, void *blob, size_t blob_n, char *err, size_t err_n) {
    if (blob_n > RDZV_MAX_BLOB) { snprintf(err, err_n, "rendezvous: a %zu-byte id is too long", blob_n); return -1; }
    if (job->world <= 1) return 0;
    return job->rank == 0 ? rdzv_file_serve(job, dir, blob, blob_n, err, err_n) : rdzv_file_join(job, dir, blob, blob_n, err, err_n);
}

// The trainer's entry: through dir when one is given (-f), else over TCP to MASTER_ADDR
// at rdzv_port_from_env().
static int rdzv_exchange(const RdzvJob *job, const char *dir, void *blob, size_t blob_n, char *err, size_t err_n) {
    if (job->world <= 1) return 0;
    if (dir && *dir) return rdzv_file_exchange(job, dir, blob, blob_n, err, err_n);
    const char *host = getenv("MASTER_ADDR");
    if (!host || !*host) {
        snprintf(err, err_n, "%d ranks without MPI need MASTER_ADDR (rank 0's address; torchrun sets it) or -f DIR (a shared directory) to exchange the NCCL id", job->world);
        return -1;
    }
    int port = rdzv_port_from_env(err, err_n);
    return port < 0 ? -1 : rdzv_tcp_exchange(job, host, port, blob, blob_n, err, err_n);
}

#endif
