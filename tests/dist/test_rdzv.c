// test_rdzv: tests of the rendezvous (train/rendezvous.h) with real processes (fork),
// real sockets on 127.0.0.1 and real files. Prints "ok NAME" or "FAIL NAME: why" per
// check; exits non-zero if any check failed. About 15 s.
//
//   ./test_rdzv                              all checks below
//   ./test_rdzv --rank R --world W [-f DIR]  one rank of an exchange through
//       rdzv_exchange (MASTER_ADDR, SFT_RDZV_PORT / MASTER_PORT, SFT_RDZV_TIMEOUT from
//       the environment): rank 0 hands out a fixed 128-byte blob, the others check they
//       got it; prints "ok rendezvous_rank_R" (tests/dist/test_two_nodes.sh runs this across
//       two network namespaces)
//
// Checks: the message layout byte for byte; 2 and 4 ranks; rank 0 starting 2 s after
// the others; strangers (garbage bytes, a connect-and-close, connections that stall,
// a flood of stalls beyond the pending limit) neither stop nor slow the job, with one
// line at most per stranger; ranks of another job (fingerprint, world size) and a
// duplicate rank refused with the reason on both sides while the right ranks go on; a
// rank that dies before the exchange replaced by a restarted one; a missing rank named
// by rank 0 within the shortened deadline; a port answered by another service refused
// by the rank; rank 0's open-file limit raised for a connection per rank, or named at
// once; the same through files, with files left by an earlier run (another
// fingerprint, the same one) in the directory; the port and timeout from the environment.
#include "../../train/rendezvous.h"
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

static int failures = 0;
static char tmpdir[256];

#define CHECK(name, cond, ...) do { \
    if (cond) printf("ok %s\n", name); \
    else { printf("FAIL %s: ", name); printf(__VA_ARGS__); printf("\n"); failures++; } \
    fflush(stdout); \
} while (0)

enum { BLOB_N = 128 };
static const uint64_t FP = 0x1234abcd5678ef01ull, FP_OTHER = 0x1234abcd5678ef02ull;

// The blob rank 0 hands out: bytes from seed (a run's "NCCL id").
static void make_blob(unsigned char *b, int seed) {
    uint32_t x = 2463534242u + (uint32_t)seed * 7919u;
    for (int i = 0; i < BLOB_N; i++) { x ^= x << 13; x ^= x >> 17; x ^= x << 5; b[i] = (unsigned char)x; }
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { char *s = (char *)calloc(1, 1); return s; }
    char *s = (char *)calloc(1, 65536);
    size_t n = fread(s, 1, 65535, f);
    s[n] = 0;
    fclose(f);
    return s;
}

static int count_lines_with(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p++) n++;
    return n;
}

// ---------------------------------------------------------------------------
// Ranks and strangers as child processes.

typedef struct {
    pid_t pid;
    char log[300];     // the child's stderr
    int status;        // exit status once reaped: 0 ok, 1 rendezvous error, 3 wrong blob; -1 killed by the test
    double ended;      // seconds after start_clock when it was reaped
} Proc;

static double start_clock;

typedef struct {
    int rank, world;
    uint64_t fp;
    double timeout, header_timeout;
    const char *dir;   // NULL: TCP on 127.0.0.1:port
    int port;
    int seed;          // rank 0's blob; the others expect the same
    double delay;      // seconds to wait before joining
} RankSpec;

static Proc start_rank(const char *tag, RankSpec s) {
    Proc p;
    memset(&p, 0, sizeof p);
    snprintf(p.log, sizeof p.log, "%s/%s.log", tmpdir, tag);
    fflush(stdout);
    p.pid = fork();
    if (p.pid != 0) return p;
    int fd = open(p.log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
    rdzv_sleep(s.delay);
    RdzvJob job = {s.rank, s.world, s.fp, s.timeout, s.header_timeout};
    unsigned char blob[BLOB_N], want[BLOB_N];
    make_blob(want, s.seed);
    if (s.rank == 0) memcpy(blob, want, BLOB_N);
    else memset(blob, 0, BLOB_N);
    char err[1000];
    int rc = s.dir ? rdzv_file_exchange(&job, s.dir, blob, BLOB_N, err, sizeof err)
                   : rdzv_tcp_exchange(&job, "127.0.0.1", s.port, blob, BLOB_N, err, sizeof err);
    if (rc != 0) { fprintf(stderr, "error: %s\n", err); _exit(1); }
    _exit(memcmp(blob, want, BLOB_N) == 0 ? 0 : 3);
}

// Reaps p, waiting at most until limit seconds after start_clock; kills it past that.
static void reap(Proc *p, double limit) {
    for (;;) {
        int st;
        pid_t r = waitpid(p->pid, &st, WNOHANG);
        if (r == p->pid) {
            p->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
            p->ended = rdzv_now() - start_clock;
            return;
        }
        if (rdzv_now() - start_clock > limit) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &st, 0);
            p->status = -1;
            p->ended = rdzv_now() - start_clock;
            return;
        }
        rdzv_sleep(0.01);
    }
}

static int still_running(Proc *p) { return waitpid(p->pid, NULL, WNOHANG) == 0; }

static void kill_proc(Proc *p) { kill(p->pid, SIGKILL); waitpid(p->pid, NULL, 0); }

// A free TCP port on 127.0.0.1 (bound and released: nobody else takes it in the meantime
// on this machine, in practice).
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET; a.sin_addr.s_addr = htonl(INADDR_LOOPBACK); a.sin_port = 0;
    socklen_t l = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(fd, (struct sockaddr *)&a, &l) != 0) {
        perror("free_port"); exit(2);
    }
    close(fd);
    return ntohs(a.sin_port);
}

static int connect_local(int port, double deadline) {
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET; a.sin_addr.s_addr = htonl(INADDR_LOOPBACK); a.sin_port = htons((uint16_t)port);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
        close(fd);
        if (rdzv_now() > deadline) return -1;
        rdzv_sleep(0.02);
    }
}

enum { GARBAGE, SCAN, STALL_SILENT, STALL_HALF, FLOOD };

// A stranger at rank 0's port: what it does once connected (STALL_* and FLOOD hold the
// connections for 30 s, longer than any test; the test kills them).
static Proc start_stranger(int kind, int port) {
    Proc p;
    memset(&p, 0, sizeof p);
    fflush(stdout);
    p.pid = fork();
    if (p.pid != 0) return p;
    double deadline = rdzv_now() + 10;
    if (kind == FLOOD) {
        for (int i = 0; i < RDZV_MAX_PENDING + 36; i++) connect_local(port, deadline);
        rdzv_sleep(30);
        _exit(0);
    }
    int fd = connect_local(port, deadline);
    if (fd < 0) _exit(2);
    if (kind == GARBAGE) {
        unsigned char junk[300];
        for (int i = 0; i < 300; i++) junk[i] = (unsigned char)(i * 37 + 11);
        send(fd, junk, sizeof junk, MSG_NOSIGNAL);
        rdzv_sleep(1);
    } else if (kind == STALL_HALF) {
        send(fd, rdzv_magic, 5, MSG_NOSIGNAL);  // the start of a header, then nothing
        rdzv_sleep(30);
    } else if (kind == STALL_SILENT) rdzv_sleep(30);
    close(fd);
    _exit(0);
}

static RankSpec tcp_spec(int rank, int world, int port, double delay) {
    RankSpec s = {rank, world, FP, 5.0, 5.0, NULL, port, 1, delay};
    return s;
}

// Runs ranks 0..world-1 (delays per rank) and checks they all exit 0 with the blob.
static void run_job(const char *name, int world, RankSpec base, const double *delays, double limit) {
    Proc p[16];
    char tag[64];
    start_clock = rdzv_now();
    for (int r = 0; r < world; r++) {
        RankSpec s = base;
        s.rank = r; s.world = world; s.delay = delays ? delays[r] : 0;
        snprintf(tag, sizeof tag, "%s_%d", name, r);
        p[r] = start_rank(tag, s);
    }
    int bad = -1;
    for (int r = 0; r < world; r++) { reap(&p[r], limit); if (p[r].status != 0 && bad < 0) bad = r; }
    char *log = bad >= 0 ? slurp(p[bad].log) : NULL;
    CHECK(name, bad < 0, "rank %d exited %d: %s", bad, bad >= 0 ? p[bad].status : 0, log ? log : "");
    free(log);
}

// ---------------------------------------------------------------------------
// The checks.

static void test_layout(void) {
    RdzvMsg m = {RDZV_VERSION, RDZV_HELLO, 0, 3, 4, 128, 0x0102030405060708ull, 0x1112131415161718ull, 0x2122232425262728ull};
    unsigned char got[RDZV_MSG_BYTES];
    rdzv_encode(&m, got);
    // by hand: "SFTRDZV\0", then version 1, kind 1, status 0, rank 3, world 4, blob_n 128
    // as little-endian uint32, then the three uint64
    const unsigned char want[RDZV_MSG_BYTES] = {'S', 'F', 'T', 'R', 'D', 'Z', 'V', 0,
        1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 128, 0, 0, 0,
        8, 7, 6, 5, 4, 3, 2, 1, 0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11, 0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21};
    RdzvMsg back;
    CHECK("message_layout", memcmp(got, want, sizeof want) == 0 && rdzv_decode(want, &back) == 0 &&
          back.rank == 3 && back.world == 4 && back.blob_n == 128 && back.fingerprint == m.fingerprint && back.nonce0 == m.nonce0,
          "encoding differs from the documented little-endian layout");
    unsigned char bad[RDZV_MSG_BYTES];
    memcpy(bad, want, sizeof bad);
    bad[0] = 'G';
    CHECK("message_wrong_magic_rejected", rdzv_decode(bad, &back) != 0, "decoded a message without the magic");
}

static void test_tcp_basic(void) {
    run_job("tcp_2_ranks", 2, tcp_spec(0, 2, free_port(), 0), NULL, 8);
    run_job("tcp_4_ranks", 4, tcp_spec(0, 4, free_port(), 0), NULL, 8);
    const double late[4] = {2.0, 0, 0, 0};
    start_clock = rdzv_now();
    run_job("tcp_rank0_starts_2s_late", 4, tcp_spec(0, 4, free_port(), 0), late, 10);
}

static void test_tcp_strangers(void) {
    int port = free_port();
    start_clock = rdzv_now();
    Proc r0 = start_rank("strangers_0", tcp_spec(0, 3, port, 0));
    Proc st[4];
    int kinds[4] = {GARBAGE, SCAN, STALL_SILENT, STALL_HALF};
    for (int i = 0; i < 4; i++) st[i] = start_stranger(kinds[i], port);
    rdzv_sleep(0.5);  // the strangers are connected (the stalls hold on) before the ranks come
    Proc r1 = start_rank("strangers_1", tcp_spec(1, 3, port, 0));
    Proc r2 = start_rank("strangers_2", tcp_spec(2, 3, port, 0));
    reap(&r0, 8); reap(&r1, 8); reap(&r2, 8);
    char *log = slurp(r0.log);
    // the ranks' header timeout is 5 s: done well before it, so the stalls did not hold it up
    CHECK("tcp_strangers_ignored", r0.status == 0 && r1.status == 0 && r2.status == 0 && r0.ended < 3.0,
          "exits %d %d %d after %.1f s; rank 0 said: %s", r0.status, r1.status, r2.status, r0.ended, log);
    int lines = count_lines_with(log, "\n");
    CHECK("tcp_strangers_one_line_each", lines <= 2 && count_lines_with(log, "ignored a connection from 127.0.0.1:") == lines,
          "%d lines for the garbage sender and the port scan (at most one each): %s", lines, log);
    free(log);
    for (int i = 0; i < 4; i++) kill_proc(&st[i]);

    // more stalled connections than rank 0 holds: the oldest are dropped, the ranks get in
    port = free_port();
    start_clock = rdzv_now();
    r0 = start_rank("flood_0", tcp_spec(0, 2, port, 0));
    Proc flood = start_stranger(FLOOD, port);
    rdzv_sleep(1.0);
    r1 = start_rank("flood_1", tcp_spec(1, 2, port, 0));
    reap(&r0, 6); reap(&r1, 6);
    log = slurp(r0.log);
    CHECK("tcp_stall_flood_ignored", r0.status == 0 && r1.status == 0 && r0.ended < 4.0,
          "exits %d %d after %.1f s: %s", r0.status, r1.status, r0.ended, log);
    lines = count_lines_with(log, "\n");
    CHECK("tcp_stall_flood_lines_capped", lines <= RDZV_MAX_REPORTS + 1 && strstr(log, "not reported"),
          "%d lines (at most %d, the last saying further ones are not reported): %s", lines, RDZV_MAX_REPORTS + 1, log);
    free(log);
    kill_proc(&flood);

    // the stalls alone, with a short header timeout: rank 0 drops them and still waits
    port = free_port();
    start_clock = rdzv_now();
    RankSpec s0 = tcp_spec(0, 2, port, 0);
    s0.header_timeout = 0.5;
    r0 = start_rank("stall_timeout_0", s0);
    st[0] = start_stranger(STALL_SILENT, port);
    st[1] = start_stranger(STALL_HALF, port);
    r1 = start_rank("stall_timeout_1", tcp_spec(1, 2, port, 1.5));
    reap(&r0, 6); reap(&r1, 6);
    log = slurp(r0.log);
    CHECK("tcp_stalled_header_dropped", r0.status == 0 && r1.status == 0 && count_lines_with(log, "no complete header in time") == 2,
          "exits %d %d; wanted two stalls dropped after 0.5 s: %s", r0.status, r1.status, log);
    free(log);
    kill_proc(&st[0]); kill_proc(&st[1]);
}

static void test_tcp_refusals(void) {
    int port = free_port();
    start_clock = rdzv_now();
    RankSpec other_fp = tcp_spec(1, 2, port, 0), other_world = tcp_spec(1, 3, port, 0.2);
    other_fp.fp = FP_OTHER;
    Proc bad_fp = start_rank("refuse_fp", other_fp), bad_world = start_rank("refuse_world", other_world);
    Proc r0 = start_rank("refuse_0", tcp_spec(0, 2, port, 0.3));
    reap(&bad_fp, 5); reap(&bad_world, 5);
    Proc r1 = start_rank("refuse_1", tcp_spec(1, 2, port, 0));
    reap(&r0, 8); reap(&r1, 8);
    char *l0 = slurp(r0.log), *lf = slurp(bad_fp.log), *lw = slurp(bad_world.log);
    const char *fp_words = "rank 1 has job fingerprint 1234abcd5678ef02, rank 0 has 1234abcd5678ef01";
    CHECK("tcp_other_fingerprint_refused", bad_fp.status == 1 && strstr(lf, fp_words) && count_lines_with(lf, "\n") == 1 && strstr(l0, fp_words),
          "exit %d; the rank said: %s; rank 0 said: %s", bad_fp.status, lf, l0);
    CHECK("tcp_other_world_refused", bad_world.status == 1 && strstr(lw, "rank 1 has world size 3, rank 0 has 2") && strstr(l0, "world size 3"),
          "exit %d; the rank said: %s; rank 0 said: %s", bad_world.status, lw, l0);
    CHECK("tcp_right_ranks_after_refusals", r0.status == 0 && r1.status == 0, "exits %d %d: %s", r0.status, r1.status, l0);
    free(l0); free(lf); free(lw);

    // two processes given rank 1: the second is refused, the job goes on with the first
    port = free_port();
    start_clock = rdzv_now();
    r0 = start_rank("dup_0", tcp_spec(0, 3, port, 0));
    r1 = start_rank("dup_1", tcp_spec(1, 3, port, 0));
    Proc dup = start_rank("dup_1b", tcp_spec(1, 3, port, 0.5));
    reap(&dup, 4);
    Proc r2 = start_rank("dup_2", tcp_spec(2, 3, port, 0));
    reap(&r0, 8); reap(&r1, 8); reap(&r2, 8);
    char *ld = slurp(dup.log);
    CHECK("tcp_duplicate_rank_refused", dup.status == 1 && strstr(ld, "rank 1 has already joined") && r0.status == 0 && r1.status == 0 && r2.status == 0,
          "exits dup %d, ranks %d %d %d: %s", dup.status, r0.status, r1.status, r2.status, ld);
    free(ld);

    // a rank that dies after joining frees its place for its restart
    port = free_port();
    start_clock = rdzv_now();
    r0 = start_rank("rejoin_0", tcp_spec(0, 3, port, 0));
    r1 = start_rank("rejoin_1", tcp_spec(1, 3, port, 0));
    rdzv_sleep(0.5);
    kill_proc(&r1);
    rdzv_sleep(0.3);
    Proc r1b = start_rank("rejoin_1b", tcp_spec(1, 3, port, 0));
    r2 = start_rank("rejoin_2", tcp_spec(2, 3, port, 0.3));
    reap(&r0, 8); reap(&r1b, 8); reap(&r2, 8);
    char *lr = slurp(r1b.log);
    CHECK("tcp_dead_rank_replaced", r0.status == 0 && r1b.status == 0 && r2.status == 0, "exits %d %d %d: %s", r0.status, r1b.status, r2.status, lr);
    free(lr);
}

static void test_tcp_failures(void) {
    int port = free_port();
    start_clock = rdzv_now();
    RankSpec s0 = tcp_spec(0, 3, port, 0), s1 = tcp_spec(1, 3, port, 0);
    s0.timeout = 1.5;
    s1.timeout = 2.5;  // still connected when rank 0 gives up, so that rank 0 names rank 2 alone
    Proc r0 = start_rank("missing_0", s0), r1 = start_rank("missing_1", s1);
    reap(&r0, 6); reap(&r1, 6);
    char *l0 = slurp(r0.log);
    CHECK("tcp_missing_rank_named", r0.status == 1 && r0.ended < 3.0 && strstr(l0, "rank 2 (of 3) never joined") && count_lines_with(l0, "\n") == 1,
          "exit %d after %.1f s: %s", r0.status, r0.ended, l0);
    CHECK("tcp_missing_rank_others_fail", r1.status == 1 && r1.ended < 4.0, "rank 1 exit %d after %.1f s", r1.status, r1.ended);
    free(l0);

    // more ranks than rank 0 may open files for: said at once, not found out at the deadline
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit rl = {100, 100};
        setrlimit(RLIMIT_NOFILE, &rl);
        RdzvJob job = {0, 200, FP, 5, 5};
        unsigned char blob[BLOB_N] = {0};
        char err[500];
        int rc = rdzv_tcp_exchange(&job, "127.0.0.1", free_port(), blob, BLOB_N, err, sizeof err);
        _exit(rc == -1 && strstr(err, "needs 327 open files for 200 ranks, the limit is 100") ? 0 : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK("tcp_open_file_limit_named", WIFEXITED(st) && WEXITSTATUS(st) == 0, "no message naming the open-file limit");
    pid = fork();
    if (pid == 0) {  // a soft limit below the need, a hard one above: raised (then a timeout: nobody joins)
        struct rlimit rl = {100, 1000};
        setrlimit(RLIMIT_NOFILE, &rl);
        RdzvJob job = {0, 200, FP, 0.5, 0.5};
        unsigned char blob[BLOB_N] = {0};
        char err[500];
        rdzv_tcp_exchange(&job, "127.0.0.1", free_port(), blob, BLOB_N, err, sizeof err);
        getrlimit(RLIMIT_NOFILE, &rl);
        _exit(rl.rlim_cur >= 327 && strstr(err, "timed out") ? 0 : 1);
    }
    waitpid(pid, &st, 0);
    CHECK("tcp_open_file_limit_raised", WIFEXITED(st) && WEXITSTATUS(st) == 0, "the soft limit was not raised to fit 200 ranks");

    // something else on the port: a rank does not take its bytes for the id
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET; a.sin_addr.s_addr = htonl(INADDR_LOOPBACK); a.sin_port = 0;
    socklen_t l = sizeof a;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 4) != 0 || getsockname(ls, (struct sockaddr *)&a, &l) != 0) { perror("listen"); exit(2); }
    port = ntohs(a.sin_port);
    start_clock = rdzv_now();
    r1 = start_rank("wrong_service_1", tcp_spec(1, 2, port, 0));
    int c = accept(ls, NULL, NULL);
    const char *reply = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    if (c >= 0) { send(c, reply, strlen(reply), MSG_NOSIGNAL); rdzv_sleep(0.2); close(c); }
    reap(&r1, 4);
    char *l1 = slurp(r1.log);
    CHECK("tcp_other_service_refused", r1.status == 1 && r1.ended < 2.0 && strstr(l1, "not this job's rank 0"), "exit %d after %.1f s: %s", r1.status, r1.ended, l1);
    free(l1);

    // a well-formed answer with another id that does not echo the rank's random number
    // (a replay, or a program speaking the protocol): not taken for rank 0's
    start_clock = rdzv_now();
    r1 = start_rank("replay_1", tcp_spec(1, 2, port, 0));
    c = accept(ls, NULL, NULL);
    RdzvJob job0 = {0, 2, FP, 5, 5};
    RdzvMsg a0 = rdzv_msg(&job0, RDZV_ANSWER, 1, BLOB_N);
    a0.nonce = 0x5151;
    unsigned char buf[RDZV_MSG_BYTES + BLOB_N], hello[RDZV_MSG_BYTES];
    rdzv_encode(&a0, buf);
    make_blob(buf + RDZV_MSG_BYTES, 2);
    if (c >= 0) { rdzv_recv_all(c, hello, sizeof hello, rdzv_now() + 2); send(c, buf, sizeof buf, MSG_NOSIGNAL); rdzv_sleep(0.2); close(c); }
    reap(&r1, 4);
    l1 = slurp(r1.log);
    CHECK("tcp_unechoed_answer_refused", r1.status == 1 && strstr(l1, "not this job's rank 0"), "exit %d after %.1f s: %s", r1.status, r1.ended, l1);
    free(l1);
    close(ls);
}

// Files as an earlier run would have left them for rank 1 (fingerprint fp, blob seed).
static void leave_stale_files(const char *dir, uint64_t fp, int seed) {
    RdzvJob job = {1, 2, fp, 1, 1};
    RdzvMsg h = rdzv_msg(&job, RDZV_HELLO, 1, BLOB_N), a = rdzv_msg(&job, RDZV_ANSWER, 1, BLOB_N), k = rdzv_msg(&job, RDZV_ACK, 1, BLOB_N);
    h.nonce = a.nonce = k.nonce = 0x5151;
    a.nonce0 = k.nonce0 = 0x7070;
    unsigned char buf[RDZV_MSG_BYTES + BLOB_N];
    rdzv_encode(&h, buf);
    rdzv_write_file(dir, "rdzv-hello", 1, buf, RDZV_MSG_BYTES);
    rdzv_encode(&a, buf);
    make_blob(buf + RDZV_MSG_BYTES, seed);
    rdzv_write_file(dir, "rdzv-answer", 1, buf, sizeof buf);
    rdzv_encode(&k, buf);
    rdzv_write_file(dir, "rdzv-ack", 1, buf, RDZV_MSG_BYTES);
}

static int dir_has_rdzv_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) if (strstr(e->d_name, "rdzv-")) n++;
    if (d) closedir(d);
    return n;
}

static void test_files(void) {
    char dir[400];
    RankSpec base = {0, 2, FP, 5.0, 5.0, NULL, 0, 1, 0};
    snprintf(dir, sizeof dir, "%s/f2", tmpdir); mkdir(dir, 0755); base.dir = dir;
    run_job("file_2_ranks", 2, base, NULL, 8);
    CHECK("file_cleaned_up", dir_has_rdzv_files(dir) == 0, "%d rendezvous files left in %s", dir_has_rdzv_files(dir), dir);
    snprintf(dir, sizeof dir, "%s/f4", tmpdir); mkdir(dir, 0755);
    const double late[4] = {1.0, 0, 0.2, 0};
    run_job("file_4_ranks_rank0_late", 4, base, late, 10);

    // an earlier run of another job left its files: rank 1 comes first, then rank 0
    snprintf(dir, sizeof dir, "%s/stale_other", tmpdir); mkdir(dir, 0755);
    leave_stale_files(dir, FP_OTHER, 2);
    const double rank_first[2] = {0.5, 0};
    run_job("file_stale_other_fingerprint", 2, base, rank_first, 8);

    // an earlier run of this very job (same fingerprint, its own id): the new rank 1
    // must not take the old answer, rank 0 must not take the old acknowledgement
    snprintf(dir, sizeof dir, "%s/stale_same_a", tmpdir); mkdir(dir, 0755);
    leave_stale_files(dir, FP, 2);
    run_job("file_stale_same_fingerprint_rank_first", 2, base, rank_first, 8);
    snprintf(dir, sizeof dir, "%s/stale_same_b", tmpdir); mkdir(dir, 0755);
    leave_stale_files(dir, FP, 2);
    start_clock = rdzv_now();
    Proc r0 = start_rank("stale_same_0", base);
    rdzv_sleep(1.0);
    int waited = still_running(&r0);
    RankSpec s1 = base; s1.rank = 1;
    Proc r1 = start_rank("stale_same_1", s1);
    reap(&r0, 6); reap(&r1, 6);
    CHECK("file_stale_same_fingerprint_rank0_first", waited && r0.status == 0 && r1.status == 0,
          "rank 0 %s before rank 1 started; exits %d %d", waited ? "waited" : "did not wait", r0.status, r1.status);

    // a rank of another job is refused, and the right rank 1 is then answered
    snprintf(dir, sizeof dir, "%s/refuse", tmpdir); mkdir(dir, 0755);
    start_clock = rdzv_now();
    RankSpec bad = base; bad.rank = 1; bad.fp = FP_OTHER;
    Proc b = start_rank("file_refuse_fp", bad);
    r0 = start_rank("file_refuse_0", base);
    reap(&b, 4);
    rdzv_sleep(0.3);  // rank 0 reads the refused rank's file meanwhile: it answers it once, and says so once
    r1 = start_rank("file_refuse_1", s1);
    reap(&r0, 8); reap(&r1, 8);
    char *lb = slurp(b.log), *l0 = slurp(r0.log);
    const char *fp_words = "rank 1 has job fingerprint 1234abcd5678ef02, rank 0 has 1234abcd5678ef01";
    CHECK("file_other_fingerprint_refused", b.status == 1 && strstr(lb, fp_words) && count_lines_with(l0, fp_words) == 1 && r0.status == 0 && r1.status == 0,
          "exits %d, ranks %d %d; the rank said: %s; rank 0 said: %s", b.status, r0.status, r1.status, lb, l0);
    free(lb); free(l0);

    snprintf(dir, sizeof dir, "%s/missing", tmpdir); mkdir(dir, 0755);
    start_clock = rdzv_now();
    RankSpec m0 = base; m0.world = 3; m0.timeout = 1.5;
    RankSpec m1 = m0; m1.rank = 1;
    r0 = start_rank("file_missing_0", m0); r1 = start_rank("file_missing_1", m1);
    reap(&r0, 6); reap(&r1, 6);
    l0 = slurp(r0.log);
    CHECK("file_missing_rank_named", r0.status == 1 && r0.ended < 3.0 && strstr(l0, "still missing rank 2 (of 3)"), "exit %d after %.1f s: %s", r0.status, r0.ended, l0);
    free(l0);
}

static void test_env(void) {
    char err[500];
    unsetenv("SFT_RDZV_PORT"); unsetenv("MASTER_PORT"); unsetenv("SFT_RDZV_TIMEOUT"); unsetenv("MASTER_ADDR");
    int none = rdzv_port_from_env(err, sizeof err);
    setenv("MASTER_PORT", "29600", 1);
    int master = rdzv_port_from_env(err, sizeof err);
    setenv("SFT_RDZV_PORT", "4242", 1);
    int own = rdzv_port_from_env(err, sizeof err);
    CHECK("port_from_env", none == 29501 && master == 29601 && own == 4242, "got %d %d %d, want 29501 29601 4242", none, master, own);
    setenv("SFT_RDZV_PORT", "42x", 1);
    int bad1 = rdzv_port_from_env(err, sizeof err);
    unsetenv("SFT_RDZV_PORT");
    setenv("MASTER_PORT", "65535", 1);
    int bad2 = rdzv_port_from_env(err, sizeof err);
    CHECK("port_from_env_bad", bad1 == -1 && bad2 == -1 && strstr(err, "MASTER_PORT"), "got %d %d: %s", bad1, bad2, err);
    RdzvJob job;
    int t0 = rdzv_job_init(&job, 1, 2, FP, err, sizeof err);
    double d0 = job.timeout_s;
    setenv("SFT_RDZV_TIMEOUT", "2.5", 1);
    int t1 = rdzv_job_init(&job, 1, 2, FP, err, sizeof err);
    double d1 = job.timeout_s, h1 = job.header_timeout_s;
    setenv("SFT_RDZV_TIMEOUT", "soon", 1);
    int t2 = rdzv_job_init(&job, 1, 2, FP, err, sizeof err);
    CHECK("timeout_from_env", t0 == 0 && d0 == 300 && t1 == 0 && d1 == 2.5 && h1 == 2.5 && t2 == -1 && strstr(err, "SFT_RDZV_TIMEOUT"),
          "got %d %g, %d %g %g, %d: %s", t0, d0, t1, d1, h1, t2, err);
    unsetenv("SFT_RDZV_TIMEOUT");
    rdzv_job_init(&job, 1, 2, FP, err, sizeof err);
    unsigned char blob[BLOB_N];
    int rc = rdzv_exchange(&job, NULL, blob, BLOB_N, err, sizeof err);
    CHECK("no_master_addr_refused", rc == -1 && strstr(err, "MASTER_ADDR"), "rc %d: %s", rc, err);
    unsetenv("MASTER_PORT");
}

// One rank of an exchange configured by the environment (tests/dist/test_two_nodes.sh).
static int one_rank(int rank, int world, const char *dir) {
    RdzvJob job;
    char err[1000];
    unsigned char blob[BLOB_N], want[BLOB_N];
    make_blob(want, 7);
    memcpy(blob, want, BLOB_N);
    if (rank != 0) memset(blob, 0, BLOB_N);
    if (rdzv_job_init(&job, rank, world, FP, err, sizeof err) != 0 || rdzv_exchange(&job, dir, blob, BLOB_N, err, sizeof err) != 0) {
        printf("FAIL rendezvous_rank_%d: %s\n", rank, err);
        return 1;
    }
    int same = memcmp(blob, want, BLOB_N) == 0;
    if (same) printf("ok rendezvous_rank_%d\n", rank);
    else printf("FAIL rendezvous_rank_%d: the blob received differs from rank 0's\n", rank);
    return same ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc >= 5 && !strcmp(argv[1], "--rank") && !strcmp(argv[3], "--world"))
        return one_rank(atoi(argv[2]), atoi(argv[4]), argc >= 7 && !strcmp(argv[5], "-f") ? argv[6] : NULL);
    if (argc > 1) { fprintf(stderr, "usage: %s [--rank R --world W [-f DIR]]\n", argv[0]); return 2; }
    signal(SIGPIPE, SIG_IGN);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_rdzv.XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 2; }
    test_layout();
    test_env();
    test_tcp_basic();
    test_tcp_strangers();
    test_tcp_refusals();
    test_tcp_failures();
    test_files();
    if (failures == 0) { char cmd[400]; snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir); if (system(cmd) != 0) return 2; }
    else printf("(logs kept in %s)\n", tmpdir);
    return failures ? 1 : 0;
}
