// The CUDA trainer (nvcc, C++) includes the headers shared with the C trainer, so
// they must stay valid C++ as well as C. `make test` compiles this file to check.
#include "base/datafile.h"
#include "train/dist.h"
#include "train/evalset.h"
#include "train/export.h"
#include "train/generate.h"
#include "model/model.h"
#include "base/json.h"
#include "model/lora.h"
#include "train/preempt.h"
#include "train/rendezvous.h"
#include "train/report.h"
#include "base/rng.h"
#include "base/safetensors.h"
#include "train/trainer.h"
#include "base/utf8.h"
#include "base/util.h"
#include "template/chat_template.h"
#include "template/render.h"
#include "template/jinja.h"
#include "tokenizer/bpe.h"

int main() { return 0; }
