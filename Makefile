# Build: `make` builds the CPU trainer and tools; `make test` builds and runs every test.
CC ?= gcc
# -march=native: the matrix kernels rely on the host's vector units. Override with
# `make ARCHFLAGS=-mavx2\ -mfma` (or empty) to build for another machine.
ARCHFLAGS ?= -march=native
CFLAGS ?= -O3 $(ARCHFLAGS) -fopenmp -Wall -Wextra -Wno-unused-function -Wno-format-truncation -std=gnu11
LDLIBS = -lm

COMMON_H = $(wildcard common/*.h data/*.h tokenizer/*.h)

.PHONY: all test clean check_headers_cxx

all: train_sft chat tok prepare

train_sft: train_sft.c $(COMMON_H)
	$(CC) $(CFLAGS) -o $@ train_sft.c $(LDLIBS)

test_sft: test_sft.c train_sft.c $(COMMON_H)
	$(CC) $(CFLAGS) -o $@ test_sft.c $(LDLIBS)

chat: chat.c train_sft.c $(COMMON_H)
	$(CC) $(CFLAGS) -o $@ chat.c $(LDLIBS)

# ---- tokenizer (tokenizer/) ----
TOK_DEPS = $(wildcard tokenizer/*.h tokenizer/*.c) $(COMMON_H)

tok: $(TOK_DEPS)
	$(CC) $(CFLAGS) -o $@ tokenizer/tok.c $(LDLIBS)

test_tok: $(TOK_DEPS)
	$(CC) $(CFLAGS) -o $@ tokenizer/test_tok.c $(LDLIBS)
# ---- end tokenizer ----

# ---- data (data/) ----
DATA_DEPS = $(wildcard data/*.h) $(TOK_DEPS)

prepare: data/prepare.c $(DATA_DEPS)
	$(CC) $(CFLAGS) -o $@ data/prepare.c $(LDLIBS)

test_prepare: data/test_prepare.c $(DATA_DEPS)
	$(CC) $(CFLAGS) -o $@ data/test_prepare.c $(LDLIBS)

make_tasks: data/make_tasks.c $(COMMON_H)
	$(CC) $(CFLAGS) -o $@ data/make_tasks.c $(LDLIBS)
# ---- end data ----

# The shared headers are also included by C++ (the CUDA trainer): keep them valid C++.
check_headers_cxx: dev/headers_check.cpp $(COMMON_H)
	$(CXX) -std=c++17 -Wall -Wextra -Wno-unused-function -Werror -fsyntax-only -I. dev/headers_check.cpp

test: train_sft chat test_sft tok test_tok prepare test_prepare
	bash dev/run_tests.sh "make -s check_headers_cxx && echo ok shared_headers_are_valid_cxx" ./test_sft ./test_tok "bash tokenizer/test_exact.sh" ./test_prepare "bash data/test_prepare.sh"

clean:
	rm -f train_sft chat test_sft tok test_tok prepare test_prepare make_tasks train_sftcu test_sftcu
