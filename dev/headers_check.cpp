// The CUDA trainer (nvcc, C++) includes the headers shared with the C trainer, so
// they must stay valid C++ as well as C. `make test` compiles this file to check.
#include "common/datafile.h"
#include "common/dist.h"
#include "common/evalset.h"
#include "common/export.h"
#include "common/generate.h"
#include "common/gpt2.h"
#include "common/json.h"
#include "common/lora.h"
#include "common/preempt.h"
#include "common/rendezvous.h"
#include "common/report.h"
#include "common/rng.h"
#include "common/safetensors.h"
#include "common/trainer.h"
#include "common/utf8.h"
#include "common/util.h"
#include "data/chat_template.h"
#include "data/jinja.h"
#include "tokenizer/bpe.h"

int main() { return 0; }
