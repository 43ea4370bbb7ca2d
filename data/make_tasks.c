// make_tasks: a synthetic instruction dataset with checkable answers, deterministic
// from a seed, small enough for a tiny GPT-2 trained from scratch on a CPU.
//
//   ./make_tasks --train-out train.jsonl --eval-out eval.jsonl [--corpus-out corpus.txt]
//                [--n-train 3000] [--n-eval 200] [--seed 1] [--max-digits 2]
//
// Tasks (answers are exact strings; a quarter of the rows each):
//   add       What is 48+57?                      -> 8+7=15, 4+5+1=10, so 105
//   subtract  What is 74-28?                      -> 14-8=6, 7-2-1=4, so 46
//   reverse   Reverse "KQWZ".                     -> ZWQK
//   sort      Sort the letters of "DCAB".         -> ABCD
// Addition and subtraction write out their working first (one digit column at a time
// from the ones up, with the carry or borrow), so that every answer token needs only
// a small step from the tokens before it (with the bare sum as the answer, the
// earlier demo model got 4 of 57 additions right). Subtraction takes a >= b. Words
// to sort have distinct letters.
// An answer is right only if all of it, working included, is exact.
// Task words are random upper-case letters, so the phrasing (mixed case) never
// merges with them and a tokenizer trained on --corpus-out keeps their letters (and
// all digits) as single tokens.
//
// train.jsonl mixes every chat shape prepare reads: {"messages": [user, assistant]}
// (most rows), the same with a system message first, {"prompt": [user message],
// "completion": answer} and plain {"prompt": "...\n", "completion": answer}.
// eval.jsonl holds {"task": NAME, "prompt": PROMPT, "completion": ANSWER}; its
// prompts never occur in train.jsonl (and are distinct). corpus.txt is the text a
// demo tokenizer is trained on: for each training row the role names, the fixed
// wording of its prompt, with each task word replaced by "X" and the numbers left
// out, and the fixed words of its answer (", so"), ending with an empty line: no
// merge involving a digit or two capital letters is ever learned.
#include "../base/rng.h"
#include "../base/util.h"

typedef struct { char *data; size_t n, cap; } Buf;

static void buf_put(Buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 4096;
        while (nc < b->n + n + 1) nc *= 2;
        b->data = (char *)realloc(b->data, nc);
        if (!b->data) fatal("out of memory");
        b->cap = nc;
    }
    memcpy(b->data + b->n, s, n);
    b->n += n;
    b->data[b->n] = 0;
}
static void buf_str(Buf *b, const char *s) { buf_put(b, s, strlen(s)); }

// A JSON string literal (our texts are ASCII; control characters are escaped).
static void buf_json(Buf *b, const char *s) {
    buf_str(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char tmp[8];
        if (c == '"' || c == '\\') { tmp[0] = '\\'; tmp[1] = (char)c; buf_put(b, tmp, 2); }
        else if (c == '\n') buf_str(b, "\\n");
        else if (c < 0x20) { snprintf(tmp, sizeof tmp, "\\u%04x", c); buf_str(b, tmp); }
        else buf_put(b, (const char *)&c, 1);
    }
    buf_str(b, "\"");
}

// ---------------------------------------------------------------- a string set

typedef struct { char **slots; size_t cap, n; } StrSet;

static uint64_t str_hash(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) { h ^= (unsigned char)*s; h *= 0x100000001b3ull; }
    return h;
}

// Returns 1 if s was added, 0 if it was already there.
static int set_add(StrSet *st, const char *s) {
    if (2 * (st->n + 1) > st->cap) {
        StrSet nw = {(char **)xcalloc(st->cap ? 2 * st->cap : 1024, sizeof(char *)), st->cap ? 2 * st->cap : 1024, 0};
        for (size_t i = 0; i < st->cap; i++) if (st->slots[i]) {
            size_t j = str_hash(st->slots[i]) & (nw.cap - 1);
            while (nw.slots[j]) j = (j + 1) & (nw.cap - 1);
            nw.slots[j] = st->slots[i]; nw.n++;
        }
        free(st->slots);
        *st = nw;
    }
    size_t j = str_hash(s) & (st->cap - 1);
    while (st->slots[j]) {
        if (!strcmp(st->slots[j], s)) return 0;
        j = (j + 1) & (st->cap - 1);
    }
    size_t l = strlen(s);
    st->slots[j] = (char *)xmalloc(l + 1);
    memcpy(st->slots[j], s, l + 1);
    st->n++;
    return 1;
}

static int set_has(const StrSet *st, const char *s) {
    if (!st->cap) return 0;
    size_t j = str_hash(s) & (st->cap - 1);
    while (st->slots[j]) {
        if (!strcmp(st->slots[j], s)) return 1;
        j = (j + 1) & (st->cap - 1);
    }
    return 0;
}

static void set_free(StrSet *st) {
    for (size_t i = 0; i < st->cap; i++) free(st->slots[i]);
    free(st->slots);
}

// ---------------------------------------------------------------- tasks

typedef struct {
    const char *task;
    char prompt[128], answer[160];
    const char *wording;         // the prompt without its numbers and task words
    const char *answer_wording;  // the answer's fixed words and punctuation, for the tokenizer corpus
} Example;

static void random_word(Rng *r, char *w, int minlen, int maxlen) {
    int n = minlen + (int)rng_below(r, (uint64_t)(maxlen - minlen + 1));
    for (int i = 0; i < n; i++) w[i] = (char)('A' + rng_below(r, 26));
    w[n] = 0;
}

// A word of distinct letters (sorting one is then unambiguous letter by letter: with
// repeated letters the earlier demo model sorted 81% right, failing mostly on repeats).
static void distinct_word(Rng *r, char *w, int minlen, int maxlen) {
    int n = minlen + (int)rng_below(r, (uint64_t)(maxlen - minlen + 1));
    for (int i = 0; i < n; i++) {
        int fresh;
        do {
            w[i] = (char)('A' + rng_below(r, 26));
            fresh = !memchr(w, w[i], (size_t)i);
        } while (!fresh);
    }
    w[n] = 0;
}

static int cmp_char(const void *a, const void *b) { return *(const char *)a - *(const char *)b; }

static void make_example(Rng *r, int max_digits, Example *e) {
    int64_t lim = 1;
    for (int i = 0; i < max_digits; i++) lim *= 10;
    char w[16];
    // task shares (of 20): add 5, reverse 5, sort 5, subtract 5. (Arithmetic has few
    // distinct prompts, 10^4 sums and about 5000 differences at 2 digits, and its
    // digit facts need many passes; the letter tasks have millions of words and learn
    // best from more of them: more words, not more epochs, got the demo model's
    // reversing and sorting right.)
    static const int TASK_OF[20] = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3};
    switch (TASK_OF[rng_below(r, 20)]) {
    case 0: {
        int64_t a = (int64_t)rng_below(r, (uint64_t)lim), b = (int64_t)rng_below(r, (uint64_t)lim);
        e->task = "add";
        snprintf(e->prompt, sizeof e->prompt, "What is %lld+%lld?", (long long)a, (long long)b);
        // the working, one column at a time from the ones up, then the sum:
        // 48+57 -> "8+7=15, 4+5+1=10, so 105" (every column but the first adds its carry)
        size_t n = 0;
        int carry = 0;
        int64_t x = a, y = b;
        for (int col = 0; col < max_digits; col++, x /= 10, y /= 10) {
            int dx = (int)(x % 10), dy = (int)(y % 10), s = dx + dy + carry;
            if (col == 0) n += (size_t)snprintf(e->answer + n, sizeof e->answer - n, "%d+%d=%d, ", dx, dy, s);
            else n += (size_t)snprintf(e->answer + n, sizeof e->answer - n, "%d+%d+%d=%d, ", dx, dy, carry, s);
            carry = s / 10;
        }
        snprintf(e->answer + n, sizeof e->answer - n, "so %lld", (long long)(a + b));
        e->wording = "What is ?";
        e->answer_wording = ", so";
        break;
    }
    case 1: {
        random_word(r, w, 3, 5);
        int n = (int)strlen(w);
        e->task = "reverse";
        snprintf(e->prompt, sizeof e->prompt, "Reverse \"%s\".", w);
        for (int i = 0; i < n; i++) e->answer[i] = w[n - 1 - i];
        e->answer[n] = 0;
        e->wording = "Reverse \"X\".";
        e->answer_wording = "";
        break;
    }
    case 2: {
        distinct_word(r, w, 3, 5);
        e->task = "sort";
        snprintf(e->prompt, sizeof e->prompt, "Sort the letters of \"%s\".", w);
        qsort(w, strlen(w), 1, cmp_char);
        snprintf(e->answer, sizeof e->answer, "%s", w);
        e->wording = "Sort the letters of \"X\".";
        e->answer_wording = "";
        break;
    }
    default: {
        int64_t a = (int64_t)rng_below(r, (uint64_t)lim), b = (int64_t)rng_below(r, (uint64_t)lim);
        if (a < b) { int64_t t = a; a = b; b = t; }  // a >= b: the difference is never negative
        e->task = "subtract";
        snprintf(e->prompt, sizeof e->prompt, "What is %lld-%lld?", (long long)a, (long long)b);
        // the working, one column at a time from the ones up, then the difference:
        // 74-28 -> "14-8=6, 7-2-1=4, so 46" (a column that borrows is written with its
        // digit plus 10; every column but the first subtracts the borrow it lent)
        size_t n = 0;
        int borrow = 0;
        int64_t x = a, y = b;
        for (int col = 0; col < max_digits; col++, x /= 10, y /= 10) {
            int dx = (int)(x % 10), dy = (int)(y % 10), d = dx - dy - borrow, lend = d < 0;
            if (col == 0) n += (size_t)snprintf(e->answer + n, sizeof e->answer - n, "%d-%d=%d, ", dx + 10 * lend, dy, d + 10 * lend);
            else n += (size_t)snprintf(e->answer + n, sizeof e->answer - n, "%d-%d-%d=%d, ", dx + 10 * lend, dy, borrow, d + 10 * lend);
            borrow = lend;
        }
        snprintf(e->answer + n, sizeof e->answer - n, "so %lld", (long long)(a - b));
        e->wording = "What is ?";
        e->answer_wording = ", so";
        break;
    }
    }
}

static const char *SYSTEM_PROMPT = "Answer carefully.";

static void message(Buf *b, const char *role, const char *content) {
    buf_str(b, "{\"role\":");
    buf_json(b, role);
    buf_str(b, ",\"content\":");
    buf_json(b, content);
    buf_str(b, "}");
}

static int64_t int_arg(const char *flag, const char *s, int64_t lo, int64_t hi) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi) fatal("%s: '%s' must be an integer in [%lld, %lld]", flag, s, (long long)lo, (long long)hi);
    return v;
}

int main(int argc, char **argv) {
    const char *train_out = NULL, *eval_out = NULL, *corpus_out = NULL;
    int64_t n_train = 3000, n_eval = 200, seed = 1, max_digits = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: make_tasks --train-out FILE --eval-out FILE [--corpus-out FILE]\n"
                   "                  [--n-train N (3000)] [--n-eval N (200)] [--seed S (1)] [--max-digits D (2)]\n"
                   "Writes synthetic tasks (add, subtract, reverse, sort) with exact answers; see docs/data.md.\n");
            return 0;
        }
        if (i + 1 >= argc) fatal("%s needs a value (see make_tasks --help)", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--train-out")) train_out = v;
        else if (!strcmp(a, "--eval-out")) eval_out = v;
        else if (!strcmp(a, "--corpus-out")) corpus_out = v;
        else if (!strcmp(a, "--n-train")) n_train = int_arg(a, v, 1, 10000000);
        else if (!strcmp(a, "--n-eval")) n_eval = int_arg(a, v, 1, 1000000);
        else if (!strcmp(a, "--seed")) seed = int_arg(a, v, 0, INT64_MAX);
        else if (!strcmp(a, "--max-digits")) max_digits = int_arg(a, v, 1, 9);
        else fatal("unknown option %s (see make_tasks --help)", a);
    }
    if (!train_out || !eval_out) fatal("--train-out and --eval-out are required (see make_tasks --help)");

    Rng r;
    rng_seed(&r, (uint64_t)seed);
    StrSet eval_prompts = {0}, train_prompts = {0};
    Buf ev = {0}, tr = {0}, co = {0};
    Example e;
    // held-out pairs first; the training rows avoid their prompts
    int64_t tries = 0, limit = 1000 * (n_train + n_eval);
    for (int64_t k = 0; k < n_eval;) {
        if (++tries > limit) fatal("cannot find %lld distinct eval prompts (raise --max-digits)", (long long)n_eval);
        make_example(&r, (int)max_digits, &e);
        if (!set_add(&eval_prompts, e.prompt)) continue;
        buf_str(&ev, "{\"task\":"); buf_json(&ev, e.task);
        buf_str(&ev, ",\"prompt\":"); buf_json(&ev, e.prompt);
        buf_str(&ev, ",\"completion\":"); buf_json(&ev, e.answer);
        buf_str(&ev, "}\n");
        k++;
    }
    for (int64_t k = 0; k < n_train;) {
        if (++tries > limit) fatal("cannot find %lld distinct training prompts (raise --max-digits)", (long long)n_train);
        make_example(&r, (int)max_digits, &e);
        if (set_has(&eval_prompts, e.prompt) || !set_add(&train_prompts, e.prompt)) continue;
        uint64_t shape = rng_below(&r, 100);
        if (shape < 70) {         // user + assistant messages
            buf_str(&tr, "{\"messages\":[");
            message(&tr, "user", e.prompt); buf_str(&tr, ",");
            message(&tr, "assistant", e.answer); buf_str(&tr, "]}\n");
            buf_str(&co, "user\n"); buf_str(&co, e.wording); buf_str(&co, "\nassistant\n"); buf_str(&co, e.answer_wording); buf_str(&co, "\n");
        } else if (shape < 80) {  // with a system message
            buf_str(&tr, "{\"messages\":[");
            message(&tr, "system", SYSTEM_PROMPT); buf_str(&tr, ",");
            message(&tr, "user", e.prompt); buf_str(&tr, ",");
            message(&tr, "assistant", e.answer); buf_str(&tr, "]}\n");
            buf_str(&co, "system\n"); buf_str(&co, SYSTEM_PROMPT); buf_str(&co, "\nuser\n"); buf_str(&co, e.wording); buf_str(&co, "\nassistant\n"); buf_str(&co, e.answer_wording); buf_str(&co, "\n");
        } else if (shape < 92) {  // prompt as a message list, completion as a string
            buf_str(&tr, "{\"prompt\":[");
            message(&tr, "user", e.prompt);
            buf_str(&tr, "],\"completion\":"); buf_json(&tr, e.answer); buf_str(&tr, "}\n");
            buf_str(&co, "user\n"); buf_str(&co, e.wording); buf_str(&co, "\nassistant\n"); buf_str(&co, e.answer_wording); buf_str(&co, "\n");
        } else {                  // plain prompt/completion strings (no chat tokens)
            char p[160];
            snprintf(p, sizeof p, "%s\n", e.prompt);
            buf_str(&tr, "{\"prompt\":"); buf_json(&tr, p);
            buf_str(&tr, ",\"completion\":"); buf_json(&tr, e.answer); buf_str(&tr, "}\n");
            buf_str(&co, e.wording); buf_str(&co, "\n"); buf_str(&co, e.answer_wording); buf_str(&co, "\n");
        }
        k++;
    }
    // The corpus ends with an empty line whatever the last row's task, so that the
    // tokenizer's last merge (a blank line) does not depend on it.
    if (co.n < 2 || co.data[co.n - 2] != '\n') buf_str(&co, "\n");
    write_file_atomic(train_out, tr.data, tr.n);
    write_file_atomic(eval_out, ev.data, ev.n);
    if (corpus_out) write_file_atomic(corpus_out, co.data, co.n);
    printf("wrote %lld training rows to %s, %lld eval pairs to %s%s%s\n", (long long)n_train, train_out, (long long)n_eval, eval_out,
           corpus_out ? ", tokenizer corpus to " : "", corpus_out ? corpus_out : "");
    set_free(&eval_prompts); set_free(&train_prompts);
    free(tr.data); free(ev.data); free(co.data);
    return 0;
}
