// The two builds of a prefill logits kernel, on every target: the logits op's, and with -DHX_TOPK_FILTER=1 the
// fused prefill top-k's filter, which takes PrefillTopkParams and appends each logit that reaches its row's floor to
// the row's region (topk_regions.h) instead of storing it. HX_FILTER is 0 or 1 for the preprocessor, Params the
// build's parameters, HX_PREFILL_NAME(logits, topk) the build's kernel name.
#pragma once
#include "hx_params.h"

#if defined(HX_TOPK_FILTER) && HX_TOPK_FILTER
#define HX_FILTER 1
#define HX_PREFILL_NAME(logits, topk) topk
typedef PrefillTopkParams Params;
#else
#define HX_FILTER 0
#define HX_PREFILL_NAME(logits, topk) logits
typedef PrefillParams Params;
#endif
