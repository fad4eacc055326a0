// Speculative drafting: the token history drafters read, the drafters (ngram_simple, ngram_index,
// ngram_map, ngram_mod, suffix_drafter, and drafter_selection over several of them), draft
// verification (greedy and stochastic), the batch budget and the replay evaluator. Included by
// qkern.hpp; include this alone for drafting without the kernels.
#pragma once

#include "drafter_selection.hpp"
#include "ngram_config.hpp"
#include "ngram_index.hpp"
#include "ngram_map.hpp"
#include "ngram_mod.hpp"
#include "ngram_simple.hpp"
#include "replay.hpp"
#include "suffix_drafter.hpp"
#include "token_history.hpp"
#include "verify.hpp"
