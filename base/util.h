// util.h: error exits, checked allocation, whole-file reads and atomic writes.
//
// Every problem with user input ends the program through fatal(): one line on
// stderr naming the file and the problem, exit status 1. Outputs are written to a
// temporary name in the same directory, flushed to disk (fsync) and renamed into
// place, and the directory is flushed after the rename, so neither a write error
// nor a crash or power loss leaves an existing good file half-overwritten.
#ifndef SFT_UTIL_H
#define SFT_UTIL_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

// A temporary directory being filled (a checkpoint in the making): fatal() removes
// it, so a failed write leaves nothing half-written behind. "" when none.
static char fatal_cleanup_dir[4200];
static void remove_flat_dir(const char *path);

//
// Fuzz builds (-DSFT_FUZZ, dev/fuzz/ only) keep the parser running in one process:
// when a harness has set sft_fatal_jump, fatal() formats the message into
// sft_fatal_message and longjmps there instead of exiting. Real programs never
// define SFT_FUZZ.
#ifdef SFT_FUZZ
#include <setjmp.h>
static jmp_buf *sft_fatal_jump;
static char sft_fatal_message[8192];
#endif

// Messages quote names and text from the input, which may hold line breaks: they are
// printed as spaces, so the message stays one line.
static void fatal(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void fatal(const char *fmt, ...) {
    char msg[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (char *c = msg; *c; c++) if (*c == '\n' || *c == '\r') *c = ' ';
#ifdef SFT_FUZZ
    if (sft_fatal_jump) {
        snprintf(sft_fatal_message, sizeof sft_fatal_message, "%s", msg);
        longjmp(*sft_fatal_jump, 1);
    }
#endif
    fprintf(stderr, "error: %s\n", msg);
    if (fatal_cleanup_dir[0]) remove_flat_dir(fatal_cleanup_dir);
    exit(1);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) fatal("out of memory allocating %zu bytes", n);
    return p;
}

static void *xcalloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) fatal("out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

// Reads a whole file into a NUL-terminated buffer. Fatal on any error.
static char *read_whole_file(const char *path, size_t *len_out) {
    FILE *f = fopen(path, "rb");
    if (!f) fatal("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0) fatal("%s: cannot stat: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) fatal("%s: is a directory, expected a file", path);
    size_t len = (size_t)st.st_size;
    char *buf = (char *)xmalloc(len + 1);
    if (len && fread(buf, 1, len, f) != len) fatal("%s: read failed (file shorter than its size, or I/O error)", path);
    fclose(f);
    buf[len] = 0;
    *len_out = len;
    return buf;
}

static int path_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static int is_directory(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

// mkdir -p. Returns 0 or -1 with errno set.
static int make_dirs(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) { errno = ENAMETOOLONG; return -1; }
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == 0) {
            char c = buf[i];
            buf[i] = 0;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
            buf[i] = c;
        }
    }
    return is_directory(path) ? 0 : -1;
}

// Removes a directory and the plain files directly inside it (our checkpoint layout).
static void remove_flat_dir(const char *path) {
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    char buf[4096];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (snprintf(buf, sizeof buf, "%s/%s", path, e->d_name) >= (int)sizeof buf) continue;  // too long to name: not ours
        unlink(buf);
    }
    closedir(d);
    rmdir(path);
}

// Flushes a directory's entries to disk (after a rename or file creation in it), so
// the rename survives a power loss. Fatal on an I/O error; filesystems that cannot
// sync a directory (EINVAL) are accepted.
static void fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) fatal("%s: cannot open directory to flush it: %s", dir, strerror(errno));
    if (fsync(fd) != 0 && errno != EINVAL) {
        int e = errno;
        close(fd);
        fatal("%s: cannot flush directory to disk: %s", dir, strerror(e));
    }
    close(fd);
}

// The directory part of path ("." when it has none).
static void parent_dir(const char *path, char *out, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(out, n, ".");
    else if (slash == path) snprintf(out, n, "/");
    else snprintf(out, n, "%.*s", (int)(slash - path), path);
}

// Atomic file output: atomic_open() opens "<path>.tmp"; atomic_commit() flushes it to
// disk, closes it, renames it over path and flushes the directory. Fatal on any write
// error (the temporary is removed, path keeps its previous content).
typedef struct { FILE *f; char path[4096]; char tmp[4096 + 8]; } AtomicFile;

static void atomic_open(AtomicFile *af, const char *path) {
    snprintf(af->path, sizeof af->path, "%s", path);
    snprintf(af->tmp, sizeof af->tmp, "%s.tmp", path);
    af->f = fopen(af->tmp, "wb");
    if (!af->f) fatal("%s: cannot write: %s", af->tmp, strerror(errno));
}

static void atomic_write(AtomicFile *af, const void *data, size_t n) {
    if (n && fwrite(data, 1, n, af->f) != n) {
        int e = errno;
        fclose(af->f);
        unlink(af->tmp);
        fatal("%s: write failed: %s", af->tmp, strerror(e));
    }
}

static void atomic_commit(AtomicFile *af) {
    int bad = fflush(af->f) != 0 || ferror(af->f) || fsync(fileno(af->f)) != 0;
    int e = errno;
    if (fclose(af->f) != 0 && !bad) { bad = 1; e = errno; }
    if (bad) { unlink(af->tmp); fatal("%s: write failed: %s", af->tmp, strerror(e)); }
    if (rename(af->tmp, af->path) != 0) {
        e = errno;
        unlink(af->tmp);
        fatal("%s: cannot rename into place: %s", af->path, strerror(e));
    }
    char dir[4096];
    parent_dir(af->path, dir, sizeof dir);
    fsync_dir(dir);
}

// Writes a whole buffer atomically.
static void write_file_atomic(const char *path, const void *data, size_t n) {
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, data, n);
    atomic_commit(&af);
}

// Wall-clock seconds.
#include <time.h>
static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// FNV-1a (64 bits) of n bytes, continuing from h (start with FNV1A_START).
#define FNV1A_START 0xcbf29ce484222325ull
static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 0x100000001b3ull; }
    return h;
}

#endif
