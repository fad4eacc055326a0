// Speculative drafting: the token history drafters read, n-gram drafters (ngram_simple,
// ngram_index, ngram_map), draft verification (greedy and stochastic), the batch budget and the
// replay evaluator. Included by qkern.hpp; include this alone for drafting without the kernels.
#pragma once

#include "ngram_config.hpp"
#include "ngram_index.hpp"
#include "ngram_map.hpp"
#include "ngram_simple.hpp"
#include "replay.hpp"
#include "token_history.hpp"
#include "verify.hpp"
