# Build: `make` builds the CPU trainer and tools (and the GPU trainer where a GPU is
# present); `make train_sftcu` builds the GPU trainer; `make test` builds and runs every
# test, the GPU code's included wherever nvcc is found.
CC ?= gcc
# -march=native: the matrix kernels rely on the host's vector units. Override with
# `make ARCHFLAGS=-mavx2\ -mfma` (or empty) to build for another machine.
# -ffp-contract=off: the compiler never fuses a*b+c on its own, whose choice depends on
# the target and its tuning (GCC avoids FMA chains on AMD Zen), so every build with FMA
# units, AVX-512 or AVX2, trains bit for bit alike (train_sft.c's gemm uses explicit FMAs).
# -fno-trapping-math -fno-math-errno: nothing reads floating-point exception flags or
# errno, and without them GCC will not vectorize a loop with a float select (the clamps
# of train_sft.c's exp_vec) or a sqrtf (AdamW). Neither changes a value.
ARCHFLAGS ?= -march=native
CFLAGS ?= -O3 $(ARCHFLAGS) -ffp-contract=off -fno-trapping-math -fno-math-errno -fopenmp -Wall -Wextra -Wno-unused-function -Wno-format-truncation -std=gnu11
LDLIBS = -lm
# `make test SAN=1`: the CPU programs with AddressSanitizer + UndefinedBehaviorSanitizer
# (any report is fatal); the GPU parts are skipped (override: the CUDA block below
# must not set them back). .build_flavor (below) rebuilds on a switch of flavor.
ifdef SAN
CFLAGS += -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
override HAVE_NVCC :=
# A sanitizer report exits 99, never 1 (a clean error exit), so a test that expects a
# program to fail with status 1 still catches one.
export ASAN_OPTIONS ?= exitcode=99
export UBSAN_OPTIONS ?= exitcode=99:print_stacktrace=1
endif

COMMON_H = $(wildcard base/*.h tokenizer/*.h template/*.h template/jinja/*.h model/*.h cpu/*.h train/*.h data/*.h)

# ---- CUDA toolkit: nvcc, the CUDA headers and cuBLAS, from the first found of ----
#   CUDA=DIR   a toolkit root holding bin/nvcc, include/ and lib/ (or lib64/): /usr/local/cuda,
#              or NVIDIA's pip wheels' .../site-packages/nvidia/cu13 (README: the toolkit
#              without root); NVCC=PATH names the compiler alone, as before;
#   nvcc on PATH, then /usr/local/cuda/bin/nvcc;
#   the pip wheels in python3's site-packages (nvidia-cuda-nvcc and friends installed there).
# The wheels ship cuBLAS under its versioned name only (libcublas.so.13), so it is linked by
# that name with an rpath. `make cuda_info` prints what was found.
ifdef CUDA
NVCC := $(CUDA)/bin/nvcc
else ifeq ($(origin NVCC),undefined)
NVCC := $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc),$(shell python3 -c \
    'import nvidia.cu13 as m, os; p = os.path.join(list(m.__path__)[0], "bin", "nvcc"); print(p if os.path.exists(p) else "")' 2>/dev/null),nvcc)
endif
HAVE_NVCC := $(shell command -v $(NVCC) 2>/dev/null)
# a GPU the driver sees: only then does plain `make` spend the minute or two nvcc takes
HAVE_GPU := $(if $(HAVE_NVCC),$(shell nvidia-smi -L 2>/dev/null | grep -q '^GPU' && echo yes))

.PHONY: all test clean check_headers_cxx cuda no_gpu_note resources

all: train_sft chat tok prepare $(if $(HAVE_GPU),cuda,no_gpu_note)

train_sft: train_sft.c $(COMMON_H)
	$(CC) $(CFLAGS) -o $@ train_sft.c $(LDLIBS)

# The CPU trainer for several ranks over MPI (mpirun -np W ./train_sft_mpi ...); needs
# Open MPI (apt install openmpi-bin libopenmpi-dev). train_sft itself needs no MPI.
MPICC ?= mpicc
HAVE_MPICC := $(shell command -v $(MPICC) 2>/dev/null)
train_sft_mpi: train_sft.c $(COMMON_H)
	$(MPICC) $(CFLAGS) -DUSE_MPI -o $@ train_sft.c $(LDLIBS)

# tests/dist/test_dist.sh's helper: compares checkpoints, writes its data, replays the loader
dev/dist_tool: dev/dist_tool.c $(COMMON_H)
	$(CC) $(CFLAGS) -o $@ dev/dist_tool.c $(LDLIBS)

test_sft: test_sft.c tests/train/sft_inputs.h tests/train/sft_kernels.h tests/train/sft_metrics.h train_sft.c tests/test_util.h $(COMMON_H)
	$(CC) $(CFLAGS) -o $@ test_sft.c $(LDLIBS)

# LoRA (model/lora.h) in the CPU trainer against dev/ref_lora.py's references
test_lora: tests/model/test_lora.c train_sft.c tests/test_util.h $(COMMON_H)
	$(CC) $(CFLAGS) -o $@ tests/model/test_lora.c $(LDLIBS)

# the hyperparameters as transformers spells them: LR schedules, AdamW's betas and epsilon
test_hyper: tests/train/test_hyper.c train_sft.c tests/test_util.h $(COMMON_H)
	$(CC) $(CFLAGS) -o $@ tests/train/test_hyper.c $(LDLIBS)

# Hugging Face import/export of every family (model/hf.h, base/safetensors.h)
# NF4 quantization (model/nf4.h) against dev/ref_nf4.py's references
test_nf4: tests/model/test_nf4.c tests/test_util.h $(COMMON_H)
	$(CC) $(CFLAGS) -o $@ tests/model/test_nf4.c $(LDLIBS)

test_hf: tests/model/test_hf.c tests/test_util.h $(COMMON_H)
	$(CC) $(CFLAGS) -o $@ tests/model/test_hf.c $(LDLIBS)

# the rendezvous (train/rendezvous.h): real processes and sockets on 127.0.0.1
test_rdzv: tests/dist/test_rdzv.c train/rendezvous.h
	$(CC) $(CFLAGS) -o $@ tests/dist/test_rdzv.c $(LDLIBS)

test_report: tests/train/test_report.c $(COMMON_H)
	$(CC) $(CFLAGS) -o $@ tests/train/test_report.c $(LDLIBS)

chat: chat.c train_sft.c $(COMMON_H)
	$(CC) $(CFLAGS) -o $@ chat.c $(LDLIBS)

# ---- GPU trainer (train_sft.cu, cuda/) ----
# `make train_sftcu` builds the bf16 trainer for Hopper (sm_90); CUDA_ARCH=sm_80 etc.
# for other GPUs. train_sftcu_fp32 computes in fp32 (for comparison with the CPU).
CUDA_ARCH ?= sm_90
NVCCFLAGS ?= -std=c++17 -O3 -arch=$(CUDA_ARCH) -Xcompiler -fopenmp,-Wall,-Wno-unused-function,-Wno-format-truncation -I.
# NCCL (data parallel across GPUs, cuda/dist.cuh): nccl.h from, first found, the CUDA
# toolkit beside nvcc, the system (/usr/include: libnccl-dev), or the pip wheel
# nvidia-nccl-cu13 (or -cu12: site-packages/nvidia/nccl/include and lib, found by python3
# or a glob). Found nowhere, or NCCL=none: the GPU programs are built with -DSFT_NO_NCCL
# (one rank; the trainer refuses W > 1 with one line). NCCL=DIR takes DIR/include and
# DIR/lib. `make nccl_info` prints which case applies.
NCCL ?= auto
CUDA_DIR := $(abspath $(dir $(HAVE_NVCC))..)
NCCL_WHEEL_GLOB = $(firstword $(wildcard $(HOME)/.local/lib/python3*/site-packages/nvidia/nccl /usr/local/lib/python3*/*-packages/nvidia/nccl \
    /usr/lib/python3*/*-packages/nvidia/nccl /opt/*/lib/python3*/site-packages/nvidia/nccl))
ifeq ($(NCCL)$(if $(HAVE_NVCC),,-no-nvcc),auto-no-nvcc)
NCCL_CASE := none
else ifeq ($(NCCL),auto)
NCCL_CASE := $(if $(wildcard $(CUDA_DIR)/include/nccl.h),toolkit,$(if $(wildcard /usr/include/nccl.h),system,wheel))
ifeq ($(NCCL_CASE),wheel)
# a pip toolkit's nvidia/cu13 has the nccl wheel beside it, in the same site-packages
NCCL_DIR := $(or $(patsubst %/include/nccl.h,%,$(wildcard $(abspath $(CUDA_DIR)/../nccl)/include/nccl.h)),$(shell \
    python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null),$(NCCL_WHEEL_GLOB))
NCCL_CASE := $(if $(wildcard $(NCCL_DIR)/include/nccl.h),wheel,none)
endif
else ifeq ($(NCCL),none)
NCCL_CASE := none
else
NCCL_CASE := dir
NCCL_DIR := $(NCCL)
endif
ifeq ($(NCCL_CASE),none)
NCCL_FLAGS = -DSFT_NO_NCCL
NCCL_LIBS =
else ifneq ($(filter wheel dir,$(NCCL_CASE)),)
NCCL_FLAGS = -I$(NCCL_DIR)/include
NCCL_LIBS = -L$(NCCL_DIR)/lib -l:libnccl.so.2 -Xlinker -rpath=$(NCCL_DIR)/lib
else
NCCL_FLAGS =
NCCL_LIBS = -lnccl
endif
NCCL_WHERE = $(if $(filter toolkit,$(NCCL_CASE)),$(CUDA_DIR)/include/nccl.h,$(if $(filter system,$(NCCL_CASE)),/usr/include/nccl.h,$(if \
    $(filter none,$(NCCL_CASE)),built with -DSFT_NO_NCCL: one rank only,$(NCCL_DIR)/include/nccl.h)))
nccl_info:
	@echo "nccl: $(NCCL_CASE) ($(NCCL_WHERE))"
CUBLAS_SONAME := $(firstword $(wildcard $(CUDA_DIR)/lib/libcublas.so.[0-9] $(CUDA_DIR)/lib/libcublas.so.[0-9][0-9]))
ifneq ($(and $(CUBLAS_SONAME),$(if $(wildcard $(CUDA_DIR)/lib/libcublas.so),,wheel)),)
CUBLAS_LIBS = -L$(CUDA_DIR)/lib -l:$(notdir $(CUBLAS_SONAME)) -l:$(subst libcublas,libcublasLt,$(notdir $(CUBLAS_SONAME))) -Xlinker -rpath=$(CUDA_DIR)/lib
CUBLAS_WHERE = $(CUBLAS_SONAME), by its versioned name
else
CUBLAS_LIBS = -lcublas -lcublasLt
CUBLAS_WHERE = -lcublas on nvcc's library path
endif
cuda_info:
	@echo "nvcc: $(if $(HAVE_NVCC),$(HAVE_NVCC) ($(shell $(NVCC) --version 2>/dev/null | grep -o 'release [0-9.]*')),not found (NVCC=$(NVCC)))"
	@echo "cublas: $(if $(HAVE_NVCC),$(CUBLAS_WHERE),-)"
	@echo "nccl: $(NCCL_CASE) ($(NCCL_WHERE))"
.PHONY: nccl_info cuda_info
CUDA_LIBS = $(CUBLAS_LIBS) $(NCCL_LIBS) -lgomp -lm
CUDA_DEPS = train_sft.cu $(wildcard cuda/*.cuh) $(COMMON_H)
CUDA_TARGETS = train_sftcu train_sftcu_fp32 test_sftcu test_sftcu_bf16

ifdef HAVE_NVCC
cuda: $(CUDA_TARGETS) $(if $(HAVE_MPICC),train_sftcu_mpi)
else
cuda:
	@echo "nvcc not found: skipping the GPU trainer (install the CUDA toolkit to build it)"
endif

# Every GPU program at once, for one `make -j` (dev/gpu_check.sh): the trainer's targets and
# the dev/cuda checks in both precisions (sub-makes sharing the job server; cpu_ref.o first,
# which both use).
gpu_all: $(CUDA_TARGETS) gpu_dev_BF16 gpu_dev_FP32
gpu_dev_BF16 gpu_dev_FP32: gpu_dev_%: dev/cuda/cpu_ref.o
	+$(MAKE) -C dev/cuda PRECISION=$* ARCH=$(CUDA_ARCH) NVCC=$(NVCC) CUBLAS_LIBS="$(CUBLAS_LIBS)" all
.PHONY: gpu_all gpu_dev_BF16 gpu_dev_FP32

no_gpu_note:
	@echo "no GPU (or no nvcc) found: built the CPU programs only; where nvcc is, make train_sftcu builds the GPU trainer and make test builds and tests it"

train_sftcu: $(CUDA_DEPS)
	$(NVCC) $(NVCCFLAGS) $(NCCL_FLAGS) -o $@ train_sft.cu $(CUDA_LIBS)

train_sftcu_fp32: $(CUDA_DEPS)
	$(NVCC) $(NVCCFLAGS) $(NCCL_FLAGS) -DENABLE_FP32 -o $@ train_sft.cu $(CUDA_LIBS)

# The GPU trainer for mpirun (or srun with MPI): the NCCL unique id goes over MPI
# (MPI_Bcast) instead of the TCP/-f rendezvous; started otherwise (torchrun), it uses
# the rendezvous like train_sftcu. nvcc compiles and links the host code with mpicxx.
MPICXX ?= mpicxx
train_sftcu_mpi: $(CUDA_DEPS)
	$(NVCC) $(NVCCFLAGS) $(NCCL_FLAGS) -ccbin $(MPICXX) -DUSE_MPI -o $@ train_sft.cu $(CUDA_LIBS)

# registers, threads, shared memory, spills and occupancy of every kernel from ptxas -v
# (dev/cuda/resources.sh; no GPU needed, part of make test wherever nvcc is)
resources:
	NVCC=$(NVCC) NCCL_FLAGS='$(NCCL_FLAGS)' bash dev/cuda/resources.sh

dev/cuda/cpu_ref.o: dev/cuda/cpu_ref.c dev/cuda/cpu_ref.h train_sft.c $(COMMON_H)
	$(CC) $(CFLAGS) -c -o $@ dev/cuda/cpu_ref.c

test_sftcu: test_sftcu.cu dev/cuda/cpu_ref.o $(CUDA_DEPS)
	$(NVCC) $(NVCCFLAGS) $(NCCL_FLAGS) -DENABLE_FP32 -o $@ test_sftcu.cu dev/cuda/cpu_ref.o $(CUDA_LIBS)

test_sftcu_bf16: test_sftcu.cu dev/cuda/cpu_ref.o $(CUDA_DEPS)
	$(NVCC) $(NVCCFLAGS) $(NCCL_FLAGS) -o $@ test_sftcu.cu dev/cuda/cpu_ref.o $(CUDA_LIBS)
# ---- end GPU trainer ----

# ---- tokenizer (tokenizer/) ----
TOK_DEPS = $(wildcard tokenizer/*.h tokenizer/*.c) $(COMMON_H)

tok: data/tok.c $(TOK_DEPS)
	$(CC) $(CFLAGS) -o $@ data/tok.c $(LDLIBS)

test_tok: tests/tokenizer/test_tok.c $(TOK_DEPS)
	$(CC) $(CFLAGS) -o $@ tests/tokenizer/test_tok.c $(LDLIBS)
# ---- end tokenizer ----

# ---- data (data/) ----
DATA_DEPS = $(wildcard data/*.h) $(TOK_DEPS)

# Parquet's GZIP and ZSTD codecs (data/parquet.h) come from zlib and libzstd where their
# headers are found (apt install zlib1g-dev libzstd-dev); without them prepare still
# builds, and a file in that codec is one error line saying what to install. Evaluated
# only where prepare (or a harness that includes it) is built.
PQ_HAS = $(shell printf '\043include <$(1)>\nint main(void){return 0;}\n' | $(CC) -x c - -o /dev/null $(2) 2>/dev/null && echo yes)
PQ_FLAGS = $(if $(call PQ_HAS,zlib.h,-lz),-DPQ_HAVE_ZLIB) $(if $(call PQ_HAS,zstd.h,-lzstd),-DPQ_HAVE_ZSTD)
PQ_LIBS = $(if $(findstring ZLIB,$(1)),-lz) $(if $(findstring ZSTD,$(1)),-lzstd)

prepare: data/prepare.c $(DATA_DEPS)
	$(eval PQF := $(PQ_FLAGS))
	$(CC) $(CFLAGS) $(PQF) -o $@ data/prepare.c $(LDLIBS) $(call PQ_LIBS,$(PQF))

test_prepare: tests/data/test_prepare.c $(DATA_DEPS)
	$(CC) $(CFLAGS) -o $@ tests/data/test_prepare.c $(LDLIBS)

test_template: tests/template/test_template.c $(DATA_DEPS)
	$(CC) $(CFLAGS) -o $@ tests/template/test_template.c $(LDLIBS)

test_jinja: tests/template/test_jinja.c template/jinja.h $(wildcard template/jinja/*.h) base/json.h base/utf8.h
	$(CC) $(CFLAGS) -o $@ tests/template/test_jinja.c $(LDLIBS)

make_tasks: data/make_tasks.c $(COMMON_H)
	$(CC) $(CFLAGS) -o $@ data/make_tasks.c $(LDLIBS)
# ---- end data ----

# The shared headers are also included by C++ (the CUDA trainer): keep them valid C++.
check_headers_cxx: tests/build/headers_check.cpp $(COMMON_H)
	$(CXX) -std=c++17 -Wall -Wextra -Wno-unused-function -Werror -fsyntax-only -I. tests/build/headers_check.cpp

# `make test`: builds what the tests need (with -j, two at a time), then tests/run.sh runs
# the tests tests/manifest lists, TEST_JOBS at a time (ONLY=REGEX picks tests by name;
# SAN=1 runs the ones tagged san). tests/build/test_builds.sh compiles train_sft a second
# time, for generic AVX2, with BUILD_CC and BUILD_CFLAGS. SAN=1 skips the MPI trainer and
# dev/dist_tool: only the multi-process tests use them, and those run in the plain build.
TEST_JOBS ?= 2
test: export BUILD_CC = $(CC)
test: export BUILD_CFLAGS = $(CFLAGS)
test: export TEST_JOBS := $(TEST_JOBS)
test: export TEST_SAN = $(if $(SAN),1)
test: export TEST_GPU = $(if $(HAVE_NVCC),1)
test: export NVCC := $(NVCC)
test: export CUBLAS_LIBS := $(CUBLAS_LIBS)
test: export NCCL_FLAGS := $(NCCL_FLAGS)
test: train_sft $(if $(SAN),,$(if $(HAVE_MPICC),train_sft_mpi) dev/dist_tool) chat test_sft test_lora test_nf4 test_hyper test_hf test_report test_rdzv tok test_tok prepare test_prepare test_jinja test_template make_tasks cuda $(if $(HAVE_NVCC),gpu_dev_BF16 gpu_dev_FP32)
	bash tests/run.sh

clean:
	rm -f train_sft train_sft_mpi dev/dist_tool chat test_sft test_lora test_nf4 test_hyper test_hf test_report test_rdzv tok test_tok prepare test_prepare test_jinja test_template make_tasks $(CUDA_TARGETS) train_sftcu_mpi dev/cuda/cpu_ref.o

# ---- sanitizers: the build-flavor stamp (see SAN=1 at the top) ----
BUILD_FLAVOR := $(if $(SAN),san,plain)
.build_flavor: FORCE
	@echo $(BUILD_FLAVOR) | cmp -s - $@ || echo $(BUILD_FLAVOR) > $@
train_sft train_sft_mpi dev/dist_tool test_sft test_lora test_nf4 test_hyper test_hf test_report test_rdzv chat tok test_tok prepare test_prepare test_jinja test_template make_tasks: .build_flavor
.PHONY: FORCE
# ---- end sanitizers ----

# ---- fuzzing (dev/fuzz/, see dev/fuzz/README.md) ----
# `make fuzz` builds one libFuzzer harness per parser with clang, ASan and UBSan;
# `make fuzz_run FUZZ_SECONDS=N` runs each for N seconds from its seed corpus.
FUZZ_CC ?= clang
FUZZ_CFLAGS = -g -O1 -DSFT_FUZZ -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -Wall -Wextra -Wno-unused-function -Wno-unknown-pragmas
FUZZ_HARNESSES = json datafile safetensors config hf_model hf_index hf_sharded hf_bnb4 state tok_gpt2 tok_json encode prepare parquet evalset jinja
FUZZ_BINS = $(FUZZ_HARNESSES:%=dev/fuzz/bin/fuzz_%)
FUZZ_SECONDS ?= 20

fuzz: $(FUZZ_BINS)

dev/fuzz/bin/fuzz_%: dev/fuzz/fuzz_%.c $(wildcard dev/fuzz/*.h) data/prepare.c $(DATA_DEPS)
	@mkdir -p dev/fuzz/bin
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $< -lm

# the Parquet reader with the codecs the machine has (PQ_FLAGS, above)
dev/fuzz/bin/fuzz_parquet: dev/fuzz/fuzz_parquet.c $(wildcard dev/fuzz/*.h) $(DATA_DEPS)
	@mkdir -p dev/fuzz/bin
	$(eval PQF := $(PQ_FLAGS))
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(PQF) -o $@ $< -lm $(call PQ_LIBS,$(PQF))

# check_fuzz_h: the harnesses' shared bookkeeping (fuzz.h), one fixed run before them
dev/fuzz/bin/check_fuzz_h: dev/fuzz/check_fuzz_h.c dev/fuzz/fuzz.h base/util.h
	@mkdir -p dev/fuzz/bin
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $< -lm -lpthread

fuzz_run: $(FUZZ_BINS) dev/fuzz/bin/check_fuzz_h
	dev/fuzz/bin/check_fuzz_h -runs=1
	bash dev/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_HARNESSES)

.PHONY: fuzz fuzz_run
# ---- end fuzzing ----
