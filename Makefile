# Build: `make` builds the CPU trainer and tools; `make test` builds and runs every test.
CC ?= gcc
# -march=native: the matrix kernels rely on the host's vector units. Override with
# `make ARCHFLAGS=-mavx2\ -mfma` (or empty) to build for another machine.
ARCHFLAGS ?= -march=native
CFLAGS ?= -O3 $(ARCHFLAGS) -fopenmp -Wall -Wextra -Wno-unused-function -Wno-format-truncation -std=gnu11
LDLIBS = -lm

COMMON_H = $(wildcard common/*.h data/*.h tokenizer/*.h)

.PHONY: all test clean check_headers_cxx cuda

all: train_sft chat tok prepare cuda

train_sft: train_sft.c $(COMMON_H)
	$(CC) $(CFLAGS) -o $@ train_sft.c $(LDLIBS)

test_sft: test_sft.c train_sft.c $(COMMON_H)
	$(CC) $(CFLAGS) -o $@ test_sft.c $(LDLIBS)

chat: chat.c train_sft.c $(COMMON_H)
	$(CC) $(CFLAGS) -o $@ chat.c $(LDLIBS)

# ---- GPU trainer (train_sft.cu, cuda/) ----
# `make train_sftcu` builds the bf16 trainer for Hopper (sm_90); CUDA_ARCH=sm_80 etc.
# for other GPUs. train_sftcu_fp32 computes in fp32 (for comparison with the CPU).
NVCC ?= nvcc
CUDA_ARCH ?= sm_90
HAVE_NVCC := $(shell command -v $(NVCC) 2>/dev/null)
NVCCFLAGS ?= -std=c++17 -O3 -arch=$(CUDA_ARCH) -Xcompiler -fopenmp,-Wall,-Wno-unused-function,-Wno-format-truncation -I.
CUDA_LIBS = -lcublas -lgomp -lm
CUDA_DEPS = train_sft.cu $(wildcard cuda/*.cuh) $(COMMON_H)
CUDA_TARGETS = train_sftcu train_sftcu_fp32 test_sftcu test_sftcu_bf16

ifdef HAVE_NVCC
cuda: $(CUDA_TARGETS)
CUDA_TEST_CMDS = ./test_sftcu ./test_sftcu_bf16 "make -s -C dev/cuda run" "make -s -C dev/cuda PRECISION=FP32 run"
else
cuda:
	@echo "nvcc not found: skipping the GPU trainer (install the CUDA toolkit to build it)"
CUDA_TEST_CMDS = "echo skip gpu_trainer: nvcc not found, the GPU trainer was not built"
endif

train_sftcu: $(CUDA_DEPS)
	$(NVCC) $(NVCCFLAGS) -o $@ train_sft.cu $(CUDA_LIBS)

train_sftcu_fp32: $(CUDA_DEPS)
	$(NVCC) $(NVCCFLAGS) -DENABLE_FP32 -o $@ train_sft.cu $(CUDA_LIBS)

dev/cuda/cpu_ref.o: dev/cuda/cpu_ref.c dev/cuda/cpu_ref.h train_sft.c $(COMMON_H)
	$(CC) $(CFLAGS) -c -o $@ dev/cuda/cpu_ref.c

test_sftcu: test_sftcu.cu dev/cuda/cpu_ref.o $(CUDA_DEPS)
	$(NVCC) $(NVCCFLAGS) -DENABLE_FP32 -o $@ test_sftcu.cu dev/cuda/cpu_ref.o $(CUDA_LIBS)

test_sftcu_bf16: test_sftcu.cu dev/cuda/cpu_ref.o $(CUDA_DEPS)
	$(NVCC) $(NVCCFLAGS) -o $@ test_sftcu.cu dev/cuda/cpu_ref.o $(CUDA_LIBS)
# ---- end GPU trainer ----

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

test: train_sft chat test_sft tok test_tok prepare test_prepare make_tasks cuda
	bash dev/run_tests.sh "make -s check_headers_cxx && echo ok shared_headers_are_valid_cxx" ./test_sft ./test_tok "bash tokenizer/test_exact.sh" ./test_prepare "bash data/test_prepare.sh" "bash data/test_tasks.sh" $(CUDA_TEST_CMDS)

clean:
	rm -f train_sft chat test_sft tok test_tok prepare test_prepare make_tasks $(CUDA_TARGETS) dev/cuda/cpu_ref.o
